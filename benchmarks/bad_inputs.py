# ruff: noqa: E501  (the corpus is a table of cases, one a line)
"""Bad-input corpus: every malformed file or flag of issue 10 (and more), run through the CLI.

Each case writes its files into a fresh temporary folder and runs ``dynosim simulate ...`` or
``dynosim tune ...`` in a child process (forked from this one after every command's module is
imported, or with ``--subprocess`` a fresh interpreter) with a timeout and a memory cap
(``RLIMIT_AS``). The verdict
of a case is one of:

* ``clear``: exit status 2 with a one-line message on stderr (what every bad input must give);
* ``traceback``: a Python traceback on stderr;
* ``hang``: still running at the timeout;
* ``exit 0``: accepted although it should have been refused;
* ``other``: any other exit (killed by the memory cap, several lines, ...).

Two controls (a valid simulation and a valid two-trial study) must exit 0 (verdict ``ok``).

Run: ``.venv/bin/python benchmarks/bad_inputs.py [--timeout 20] [--memory-gb 6] [--only NAME]
[--subprocess]``; ``tests/unit/test_bad_input_corpus.py`` runs it in the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "benchmarks"):  # this checkout's dynosim and search; the cases
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

DEPLOYMENT = """\
model: meta-llama/Llama-3.1-8B-Instruct
gpu: h200_sxm
timing: roofline
tp: 1
workers: 1
router: kv_aware
kv_router: {overlap_weight: 1.0, temperature: 0.0}
engine: {max_num_seqs: 64, max_num_batched_tokens: 4096, gpu_memory_utilization: 0.9}
slo: {ttft_ms: 2000, itl_ms: 50}
"""
WORKLOAD = """\
requests: 5
arrival: {process: poisson, rate_rps: 2}
input_tokens: {dist: fixed, value: 100}
output_tokens: {dist: fixed, value: 10}
"""
MOONCAKE = '{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}\n'
SPACE = """\
knobs:
  router: {type: choice, values: [round_robin, kv_aware]}
  kv_router.overlap_weight: {type: float, low: 0.0, high: 2.0, step: 0.5, when: {router: kv_aware}}
  engine.max_num_seqs: {type: int, low: 16, high: 128, log: true}
"""
STUDY = """\
name: corpus
model: meta-llama/Llama-3.1-8B-Instruct
gpu: h200_sxm
gpu_budget: 2
deployment: {timing: roofline, slo: {ttft_ms: 2000, itl_ms: 50}}
workload: {file: workload.yaml}
space: space.yaml
objectives:
  - {metric: output_token_throughput_per_gpu, direction: maximize}
  - {metric: output_token_throughput_per_user, direction: maximize}
constraints: ["time_to_first_token.p90 <= 2000"]
optimizer: {name: random}
budget: {max_trials: 2}
executor: {kind: local}
storage: study.journal
seed: 0
"""


@dataclass(frozen=True)
class Case:
    """One input: files to write (over the defaults), the CLI arguments, the expected outcome."""

    name: str
    args: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    ok: bool = False
    setup: tuple[tuple[str, ...], ...] = ()
    """Commands run first (they must succeed), e.g. a study ``export`` then reads."""
    after: dict[str, str] = field(default_factory=dict)
    """Files written after ``setup`` (a workload edited after its study ran)."""
    sparse: dict[str, int] = field(default_factory=dict)
    """Files extended to this many bytes with a hole (they claim a size they do not use)."""


def _sim(name: str, deployment: str = DEPLOYMENT, *extra: str, **files: str) -> Case:
    """``simulate deployment.yaml --workload workload.yaml`` unless ``extra`` names a source."""
    source = extra if any(a in ("--trace", "--workload") for a in extra) else (
        "--workload", "workload.yaml", *extra
    )  # fmt: skip
    return Case(
        name, ("simulate", "deployment.yaml", *source), {"deployment.yaml": deployment, **files}
    )


def _dep(name: str, old: str, new: str) -> Case:
    assert old in DEPLOYMENT, old
    return _sim(name, DEPLOYMENT.replace(old, new))


def _wl(name: str, text: str) -> Case:
    return _sim(name, DEPLOYMENT, **{"workload.yaml": text})


def _wl_edit(name: str, old: str, new: str) -> Case:
    assert old in WORKLOAD, old
    return _wl(name, WORKLOAD.replace(old, new))


def _trace(name: str, text: str, *extra: str, suffix: str = "jsonl") -> Case:
    return _sim(name, DEPLOYMENT, "--trace", f"trace.{suffix}", *extra, **{f"trace.{suffix}": text})


def _tune(name: str, study: str = STUDY, *extra: str, **files: str) -> Case:
    args = ("tune", "study.yaml", "--no-progress", *extra)
    return Case(name, args, {"study.yaml": study, **files})


def _study(name: str, old: str, new: str, *extra: str) -> Case:
    assert old in STUDY, old
    return _tune(name, STUDY.replace(old, new), *extra)


def _space(name: str, text: str) -> Case:
    return _tune(name, STUDY, **{"space.yaml": text})


def _line(**fields: object) -> str:
    import json

    obj = {"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}
    obj.update(fields)
    return json.dumps(obj) + "\n"


LAUGHS = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)


def cases() -> list[Case]:
    """The corpus, in the order of issue 10's list, then more, then issue 23's."""
    import bad_inputs_added

    return _cases_10() + bad_inputs_added.cases(sys.modules[__name__])


def _cases_10() -> list[Case]:
    big = "9" * 5000
    return [
        # controls
        Case(
            "control: valid simulate",
            ("simulate", "deployment.yaml", "--workload", "workload.yaml"),
            {"deployment.yaml": DEPLOYMENT},
            ok=True,
        ),
        Case(
            "control: valid tune (2 trials)",
            ("tune", "study.yaml", "--no-progress"),
            {"study.yaml": STUDY},
            ok=True,
        ),
        # finite numbers
        _dep(
            "deployment gpu_memory_utilization .nan",
            "gpu_memory_utilization: 0.9",
            "gpu_memory_utilization: .nan",
        ),
        _dep(
            "deployment framework_overhead_us .nan",
            "workers: 1",
            "workers: 1\nframework_overhead_us: .nan",
        ),
        _dep(
            "deployment kv_router.overlap_weight .nan",
            "overlap_weight: 1.0",
            "overlap_weight: .nan",
        ),
        _dep("deployment kv_router.temperature .inf", "temperature: 0.0", "temperature: .inf"),
        _dep("deployment slo.ttft_ms .nan", "ttft_ms: 2000", "ttft_ms: .nan"),
        _dep("deployment slo.itl_ms -.inf", "itl_ms: 50", "itl_ms: -.inf"),
        _dep("deployment gpu_hour_usd .nan", "workers: 1", "workers: 1\ngpu_hour_usd: .nan"),
        _space("space float knob low .nan", SPACE.replace("low: 0.0", "low: .nan")),
        _space("space float knob high .inf", SPACE.replace("high: 2.0", "high: .inf")),
        _wl_edit("workload rate_rps .nan", "rate_rps: 2", "rate_rps: .nan"),
        _study("study constraint bound 1e999", "<= 2000", "<= 1e999"),
        _study(
            "study objective bounds [0, .inf]",
            "direction: maximize}\n  - {metric: output_token_throughput_per_user",
            "direction: maximize, bounds: [0, .inf]}\n  - {metric: output_token_throughput_per_user",
        ),
        _study(
            "study workload.speedup .inf",
            "{file: workload.yaml}",
            "{file: workload.yaml, speedup: .inf}",
        ),
        # bounded sizes
        _wl_edit("workload requests 1000000000", "requests: 5", "requests: 1000000000"),
        _wl_edit("workload requests 25000000", "requests: 5", "requests: 25000000"),
        _wl_edit(
            "workload warmup 30000000", "requests: 5", "requests: 5\nwarmup_requests: 30000000"
        ),
        _wl_edit("workload input value 10**12", "value: 100", "value: 1000000000000"),
        _wl(
            "workload 10M requests x 100k tokens",
            WORKLOAD.replace("requests: 5", "requests: 10000000").replace(
                "value: 100", "value: 100000"
            ),
        ),
        _wl_edit(
            "workload lognormal sigma 1000",
            "{dist: fixed, value: 100}",
            "{dist: lognormal, mean: 100, sigma: 1000}",
        ),
        _wl_edit(
            "workload prefix tokens 10**12",
            "requests: 5",
            "requests: 5\nprefix: {groups: 8, tokens: 1000000000000}",
        ),
        _wl_edit(
            "workload sessions turns 10**9",
            "requests: 5",
            "requests: 5\nsessions: {turns: 1000000000, think_time_s: 1}",
        ),
        _wl_edit(
            "workload session prompts grow past limits",
            "requests: 5",
            "requests: 100000\nsessions: {turns: 100000}",
        ),
        _wl_edit(
            "workload concurrency 10**30",
            "arrival: {process: poisson, rate_rps: 2}",
            "arrival: {process: closed_loop, concurrency: 1000000000000000000000000000000}",
        ),
        _study(
            "study workload.max_requests 10**12",
            "{file: workload.yaml}",
            "{file: workload.yaml, max_requests: 1000000000000}",
        ),
        _trace("cli --max-requests 0", MOONCAKE, "--max-requests", "0"),
        # integer-microsecond times in range
        _wl_edit("workload poisson rate_rps 1e-300", "rate_rps: 2", "rate_rps: 1.0e-300"),
        _wl_edit(
            "workload constant rate_rps 1e-9",
            "process: poisson, rate_rps: 2",
            "process: constant, rate_rps: 1.0e-9",
        ),
        _wl_edit(
            "workload gamma cv 1e-200",
            "process: poisson, rate_rps: 2",
            "process: gamma, rate_rps: 2, cv: 1.0e-200",
        ),
        _wl_edit(
            "workload think_time_s 1e300",
            "requests: 5",
            "requests: 5\nsessions: {turns: 2, think_time_s: 1.0e300}",
        ),
        _wl_edit(
            "workload ramp_up_s .inf",
            "arrival: {process: poisson, rate_rps: 2}",
            "arrival: {process: closed_loop, concurrency: 2, ramp_up_s: .inf}",
        ),
        _trace("mooncake timestamp 1e300", _line(timestamp=1e300)),
        _trace(
            "mooncake epoch-nanosecond timestamps",
            _line(timestamp=1_700_000_000_000_000_000) + _line(timestamp=1_700_000_000_100_000_000),
        ),
        _trace("mooncake delay 1e300", _line(session_id=1) + _line(session_id=1, delay=1e300)),
        _trace(
            "mooncake timestamp 400-digit integer",
            MOONCAKE.replace('"timestamp": 0', '"timestamp": ' + "9" * 400),
        ),
        _trace(
            "csv arrival_s 1e15", "arrival_s,input_tokens,output_tokens\n1e15,100,5\n", suffix="csv"
        ),
        _trace(
            "azure timestamps 40 years apart",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n1990-01-01 00:00:00.0,10,2\n2030-01-01 00:00:00.0,10,2\n",
            suffix="csv",
        ),
        _trace(
            "cli --trace-speedup 1e-300",
            MOONCAKE + _line(timestamp=1000),
            "--trace-speedup",
            "1e-300",
        ),
        _trace("cli --trace-speedup nan", MOONCAKE, "--trace-speedup", "nan"),
        # duplicate YAML keys, CSV columns, knobs
        _dep("deployment duplicate key tp", "tp: 1", "tp: 1\ntp: 2"),
        _dep(
            "deployment duplicate nested key",
            "max_num_seqs: 64,",
            "max_num_seqs: 64, max_num_seqs: 32,",
        ),
        _wl_edit("workload duplicate key requests", "requests: 5", "requests: 5\nrequests: 7"),
        _study("study duplicate key seed", "seed: 0", "seed: 0\nseed: 1"),
        _space("space knob listed twice", SPACE + "  router: {type: choice, values: [random]}\n"),
        _trace(
            "csv duplicate column input_tokens",
            "arrival_s,input_tokens,output_tokens,input_tokens\n0,100,5,200\n",
            suffix="csv",
        ),
        _trace(
            "azure duplicate column TIMESTAMP",
            "TIMESTAMP,ContextTokens,GeneratedTokens,TIMESTAMP\n2024-01-01 00:00:00.0,10,2,2024-01-01 00:00:01.0\n",
            suffix="csv",
        ),
        # objectives
        _study(
            "study objectives: []",
            "objectives:\n  - {metric: output_token_throughput_per_gpu, direction: maximize}\n  - {metric: output_token_throughput_per_user, direction: maximize}",
            "objectives: []",
        ),
        _study(
            "study the same objective twice",
            "output_token_throughput_per_user, direction",
            "output_token_throughput_per_gpu, direction",
        ),
        _study(
            "study the same objective twice (.avg)",
            "{metric: output_token_throughput_per_gpu, direction: maximize}",
            "{metric: output_token_throughput_per_user.avg, direction: maximize}",
        ),
        # fixed or knob; dead knobs
        _study(
            "study field fixed and a knob",
            "timing: roofline,",
            "timing: roofline, router: kv_aware,",
        ),
        _study(
            "study nested field fixed and a knob",
            "slo: {ttft_ms: 2000, itl_ms: 50}}",
            "slo: {ttft_ms: 2000, itl_ms: 50}, engine: {max_num_seqs: 64}}",
        ),
        _space(
            "space when on a value never taken",
            SPACE.replace("when: {router: kv_aware}", "when: {router: kv_awar}"),
        ),
        _space(
            "space when conditions that never hold together",
            SPACE
            + "  kv_router.temperature: {type: float, low: 0, high: 1, when: {router: round_robin, kv_router.overlap_weight: 1.0}}\n",
        ),
        # CLI overrides validated like file values
        _study(
            "study max_trials -3 hidden by --n-trials 5",
            "max_trials: 2",
            "max_trials: -3",
            "--n-trials",
            "5",
        ),
        _study(
            "study executor kind bogus hidden by --executor",
            "kind: local",
            "kind: bogus",
            "--executor",
            "local",
        ),
        _tune("cli --n-trials -1", STUDY, "--n-trials", "-1"),
        _tune("cli --max-wall-s nan", STUDY, "--max-wall-s", "nan"),
        _tune("cli --seed -5", STUDY, "--seed", "-5"),
        # every trial infeasible for a reason known before the first trial
        _study(
            "study unknown model",
            "model: meta-llama/Llama-3.1-8B-Instruct",
            "model: nobody/no-such-model",
        ),
        _space(
            "space tp knob values [one, two]", SPACE + "  tp: {type: choice, values: [one, two]}\n"
        ),
        _space(
            "space boolean knob typed int",
            SPACE + "  engine.enable_prefix_caching: {type: int, low: 0, high: 1}\n",
        ),
        _space("space model as a knob", SPACE + "  model: {type: choice, values: [a/b, c/d]}\n"),
        _study(
            "study deployment value invalid for every knob",
            "timing: roofline,",
            "timing: roofline, engine: {gpu_memory_utilization: .nan},",
        ),
        _space("space tp 4 with gpu_budget 2", SPACE + "  tp: {type: choice, values: [4]}\n"),
        # YAML that is not JSON-like data
        _sim("deployment empty file", ""),
        _sim("deployment top-level list", "- a\n- b\n"),
        _sim("deployment YAML syntax error", DEPLOYMENT + "engine: {max_num_seqs: [\n"),
        _sim("deployment date value", DEPLOYMENT + "gpu_hour_usd: 2024-01-01\n"),
        _sim("deployment !!binary", DEPLOYMENT + "gpu_hour_usd: !!binary aGVsbG8=\n"),
        _sim("deployment billion laughs", LAUGHS),
        _sim("deployment nested 10000 deep", "a: " + "[" * 10000 + "]" * 10000 + "\n"),
        _sim("deployment 5000-digit integer", DEPLOYMENT.replace("workers: 1", f"workers: {big}")),
        _study("study 5000-digit seed", "seed: 0", f"seed: {big}"),
        _study("study seed 2**40", "seed: 0", "seed: 1099511627776"),
        _study(
            "study workload path ~nobody", "{file: workload.yaml}", "{file: ~no_such_user_x/w.yaml}"
        ),
        _study("study gpu_budget 0", "gpu_budget: 2", "gpu_budget: 0"),
        # traces that are not traces
        _trace("trace of random bytes", "\x00\x01\x02garbage\xff"),
        _trace("trace empty", ""),
        _trace(
            "mooncake 5000-digit integer", MOONCAKE.replace('"timestamp": 0', f'"timestamp": {big}')
        ),
        _trace("mooncake nested 100000 deep", '{"a": ' + "[" * 100000 + "]" * 100000 + "}\n"),
        _trace(
            "azure fraction of unicode digits",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-01-01 00:00:00.\u00b2,10,2\n",
            suffix="csv",
        ),
        _trace(
            "csv header with a NUL byte",
            "arrival_s,input_tokens,output_tokens\x00\n0,1,1\n",
            suffix="csv",
        ),
        _wl(
            "workload empirical trace missing",
            WORKLOAD.replace("{dist: fixed, value: 10}", "{dist: empirical, trace: missing.jsonl}"),
        ),
        _wl("workload trace ref speedup 0", "trace: trace.jsonl\nspeedup: 0\n"),
        # disaggregated pools, KV links and planners (issue 7)
        _dep("disagg with a top-level tp", "tp: 1", "mode: disagg\ntp: 1\nprefill: {}\ndecode: {}"),
        _dep("disagg without a decode pool", "tp: 1\nworkers: 1", "mode: disagg\nprefill: {tp: 1}"),
        _dep("disagg pool tp 3", "tp: 1\nworkers: 1", "mode: disagg\nprefill: {tp: 3}\ndecode: {}"),
        _dep(
            "disagg pool tp 64 (does not divide the heads)",
            "tp: 1\nworkers: 1",
            "mode: disagg\nprefill: {tp: 64}\ndecode: {}",
        ),
        _dep(
            "disagg pool unknown field",
            "tp: 1\nworkers: 1",
            "mode: disagg\nprefill: {tp: 1, replicas: 2}\ndecode: {}",
        ),
        _dep(
            "disagg decode pool does not fit in memory",
            "tp: 1\nworkers: 1",
            "mode: disagg\nprefill: {}\ndecode: {engine: {gpu_memory_utilization: 0.05}}",
        ),
        _dep("pools with mode agg", "tp: 1", "tp: 1\nprefill: {tp: 1}"),
        _dep(
            "sglang field on vllm",
            "engine: {",
            "backend: vllm\nengine: {enable_mixed_chunk: true, ",
        ),
        _dep(
            "trtllm field on sglang",
            "engine: {",
            "backend: sglang\nengine: {capacity_scheduler_policy: MAX_UTILIZATION, ",
        ),
        _dep(
            "schedule_policy lifo", "engine: {", "backend: sglang\nengine: {schedule_policy: lifo, "
        ),
        _dep("page size 1 on vllm", "engine: {", "backend: vllm\nengine: {block_size: 1, "),
        _dep(
            "schedule_conservativeness .nan",
            "engine: {",
            "backend: sglang\nengine: {schedule_conservativeness: .nan, ",
        ),
        _dep(
            "speculative eagle without acceptance", "tp: 1", "tp: 1\nspeculative: {method: eagle}"
        ),
        _dep("speculative acceptance 1.5", "tp: 1", "tp: 1\nspeculative: {acceptance: 1.5}"),
        _dep(
            "speculative acceptance list too short",
            "tp: 1",
            "tp: 1\nspeculative: {num_speculative_tokens: 3, acceptance: [0.9]}",
        ),
        _dep(
            "speculative draft without model",
            "tp: 1",
            "tp: 1\nspeculative: {method: draft, acceptance: 0.6}",
        ),
        _dep("speculative tokens 99", "tp: 1", "tp: 1\nspeculative: {num_speculative_tokens: 99}"),
        _dep("kv_transfer gbps -5", "tp: 1", "tp: 1\nkv_transfer: {gbps: -5}"),
        _dep("kv_transfer latency .nan", "tp: 1", "tp: 1\nkv_transfer: {latency_us: .nan}"),
        _dep("kv_transfer link ethernet", "tp: 1", "tp: 1\nkv_transfer: {link: ethernet}"),
        _dep("decode_router unknown", "tp: 1", "tp: 1\ndecode_router: fastest"),
        _dep(
            "max_local_prefill_tokens with mode agg", "tp: 1", "tp: 1\nmax_local_prefill_tokens: 64"
        ),
        _dep("planner min above max", "tp: 1", "tp: 1\nplanner: {min_workers: 3, max_workers: 2}"),
        _dep("planner workers outside limits", "tp: 1", "tp: 1\nplanner: {min_workers: 2}"),
        _dep("planner interval 0", "tp: 1", "tp: 1\nplanner: {adjustment_interval_s: 0}"),
        _dep("planner startup -1", "tp: 1", "tp: 1\nplanner: {startup_s: -1}"),
        _dep("planner policy unknown", "tp: 1", "tp: 1\nplanner: {policy: magic}"),
        _dep("aic_database_mode unknown", "tp: 1", "tp: 1\naic_database_mode: measured"),
        _dep(
            "planner pool limits with mode agg",
            "tp: 1",
            "tp: 1\nplanner: {decode: {max_workers: 4}}",
        ),
        _dep(
            "planner max_gpus below the initial GPUs",
            "tp: 1\nworkers: 1",
            "tp: 1\nworkers: 2\nplanner: {max_gpus: 1}",
        ),
        _sim(
            "simulate --timeline-interval 0",
            DEPLOYMENT,
            "--workload",
            "workload.yaml",
            "--timeline",
            "t.html",
            "--timeline-interval",
            "0",
            **{"workload.yaml": WORKLOAD},
        ),
    ]


def _limit(memory_gb: float) -> None:
    cap = int(memory_gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _write(folder: Path, case: Case) -> None:
    files = {"workload.yaml": WORKLOAD, "space.yaml": SPACE, "trace.jsonl": MOONCAKE, **case.files}
    _put(folder, files)
    for name, size in case.sparse.items():
        with (folder / name).open("r+b") as f:
            f.truncate(size)


def _put(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8", errors="surrogateescape")


def _verdict(case: Case, code: int | None, stderr: str, timeout_s: float) -> tuple[str, str]:
    """(verdict, the last stderr line) of a finished (``code``) or timed-out (None) case."""
    if code is None:
        return "hang", f"(still running after {timeout_s:g} s)"
    err = [line for line in stderr.splitlines() if line.strip()]
    last = err[-1] if err else ""
    if case.ok:
        return ("ok" if code == 0 else "failed"), last
    if "Traceback (most recent call last)" in stderr:
        return "traceback", last
    if code == 0:
        return "exit 0", "(accepted)"
    if code == 2 and len(err) == 1 and err[0].startswith("dynosim "):
        return "clear", last
    return "other", f"exit {code}: {last}"


def run_case(case: Case, timeout_s: float, memory_gb: float) -> tuple[str, str, float]:
    """(verdict, the last stderr line, seconds) of one case, run as a ``dynosim`` process."""
    with tempfile.TemporaryDirectory(prefix="dynosim-bad-") as tmp:
        folder = Path(tmp)
        _write(folder, case)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for words in case.setup:
            command = [sys.executable, "-m", "search.cli", *words]
            subprocess.run(command, cwd=folder, env=env, capture_output=True, check=True)
        _put(folder, case.after)
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "search.cli", *case.args],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                preexec_fn=lambda: _limit(memory_gb),
                check=False,
            )
        except subprocess.TimeoutExpired:
            return (*_verdict(case, None, "", timeout_s), time.perf_counter() - start)
        took = time.perf_counter() - start
    return (*_verdict(case, proc.returncode, proc.stderr, timeout_s), took)


def preload() -> None:
    """Import every command's module, so that :func:`fork_case` children start at once."""
    import importlib

    cli = importlib.import_module("search.cli.main")
    for name in cli.COMMANDS:
        cli._command_module(name)
    for module in (
        "dynosim.validation.calibrate",
        "dynosim.validation.validate",
        "rich.table",
        "search.store.open",
        "search.run.driver",
    ):  # what commands import lazily
        importlib.import_module(module)


def fork_case(case: Case, timeout_s: float, memory_gb: float) -> tuple[str, str, float]:
    """:func:`run_case` in a forked child of this process (no interpreter start: ~50x faster).

    The child gets its own process group, the memory cap and a fresh folder; at the timeout its
    whole group is killed. Call :func:`preload` first.
    """
    from search.cli.main import main as cli_main

    with tempfile.TemporaryDirectory(prefix="dynosim-bad-") as tmp:
        folder = Path(tmp)
        _write(folder, case)
        err_path = folder / ".stderr"
        start = time.perf_counter()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.setpgid(0, 0)
                os.chdir(folder)
                _limit(memory_gb)
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                os.dup2(null, 2)
                sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115  (pytest replaced them)
                sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
                for words in case.setup:
                    if cli_main(list(words)) != 0:
                        raise RuntimeError(f"setup {' '.join(words)} failed")
                _put(folder, case.after)
                sys.stderr.flush()
                fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(fd, 2)
                code = cli_main(list(case.args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # what an uncaught exception would print
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        status: int | None = None
        while time.perf_counter() - start < timeout_s:
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(raw)
                break
            time.sleep(0.01)
        took = time.perf_counter() - start
        if status is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        stderr = err_path.read_text(errors="replace") if err_path.exists() else ""
    if status is not None and status < 0:
        return "other", f"killed by signal {-status}", took
    return (*_verdict(case, status, stderr, timeout_s), took)


def main() -> int:
    """Run the corpus and print one line per case, then the totals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    parser.add_argument("--memory-gb", type=float, default=6.0, help="address-space cap")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    parser.add_argument(
        "--subprocess",
        action="store_true",
        help="start a fresh `python -m search.cli` per case (slow) instead of forking this one",
    )
    args = parser.parse_args()
    selected = [c for c in cases() if not args.only or args.only in c.name]
    totals: dict[str, int] = {}
    run = run_case if args.subprocess else fork_case
    if not args.subprocess:
        preload()
    for case in selected:
        verdict, last, took = run(case, args.timeout, args.memory_gb)
        totals[verdict] = totals.get(verdict, 0) + 1
        print(f"{verdict:9s} {took:5.1f}s  {case.name}: {last[:160]}", flush=True)
    bad = len([c for c in selected if not c.ok])
    print(
        f"\n{len(selected)} cases ({bad} bad inputs, {len(selected) - bad} controls): "
        + ", ".join(f"{k} {v}" for k, v in sorted(totals.items()))
    )
    wrong = sum(v for k, v in totals.items() if k not in ("clear", "ok"))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
