"""Fidelity of the simulator on AIConfigurator's real-GPU rows: calibration set vs held out.

Every aggregated row of ``silicon_sample.csv`` and every disaggregated row that records its
pools is replayed through :func:`dynosim.validation.validate.replay` with the shipped
calibration profile, the path ``dynosim validate`` takes (same client model, host costs and
recipe flags). Rows of ``CALIBRATION_GROUPS`` (aggregated) form the calibration set; every
other row is held out. For each set the script prints rows run / refused (reasons counted),
pooled TTFT and TPOT figures (MAPE, median absolute error, signed bias, in %), the same per
group and per slice (backend, GPU generation, dense / MoE / MoE with attention DP > 1, mode,
vLLM with / without async scheduling),
and the median simulated/measured ratio per concurrency bucket (<= 8, 9-64, > 64 clients).

The pooled figures (and the concurrency buckets) are over the aggregated rows; the slices by
backend, generation and architecture include the replayable disaggregated rows, which also
have a slice of their own (``mode: disagg``). Rows counted apart (listed in their own slice,
and the pooled figures are given with and without them): rows whose step times are partly
AIConfigurator estimates (the replay raises
:class:`~dynosim.perf.aic.EstimatedTimingWarning`, HYBRID database mode) and rows of an
architecture the step-time model does not time as measured (hybrid linear attention: a model
with Gated DeltaNet layers). Held-out rows that are copies of a calibration row (the same GPU,
backend, parallelism, lengths, concurrency and measured TTFT and TPOT under another model
name: InferenceX's dumps name its DeepSeek-R1 runs DeepSeek-V3, so 97 DeepSeek-V3 B200 SGLang
rows and 65 DeepSeek-R1 B200 TRT-LLM rows repeat calibration rows) are held out by name only:
they have a slice of their own, and the held-out pooled figures are given without them too.

Run (2 worker processes; the AIC tables come from ``~/.cache/dynosim``)::

    .venv/bin/python benchmarks/fidelity.py [--jobs 2] [--sample N] [--match TEXT]
        [--json OUT] [--markdown OUT]

``--sample N`` replays every N-th row of each group (deterministic); ``--match`` keeps the
groups whose ``model/system/backend/mode`` contains TEXT; ``--markdown OUT`` writes the
summary table of the README's fidelity section. The figures are reproducible bit for bit: the
rows are replayed independently (a fixed seed per row) and reduced in file order.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import re
import statistics
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity_report import report, summary_table, targets

from dynosim.errors import DynosimError
from dynosim.perf.aic import EstimatedTimingWarning
from dynosim.perf.calibration import gpu_generation
from dynosim.perf.catalog import model_spec
from dynosim.validation.measurement import Measurement
from dynosim.validation.measurements import read_measurements
from dynosim.validation.silicon import CALIBRATION_GROUPS, silicon_csv
from dynosim.validation.validate import overlapped, replay

BUCKETS = (("c<=8", 1, 8), ("c 9-64", 9, 64), ("c>64", 65, 1 << 30))
CHUNK = 12  # rows per task: a worker keeps one group's perf tables warm across its chunk


@dataclass(frozen=True, slots=True)
class Outcome:
    """One row's replay: simulated TTFT/TPOT (ms), or why it was refused; and its flags."""

    index: int
    ttft_ms: float
    tpot_ms: float
    refused: str | None
    estimated: bool


def _replay_chunk(chunk: list[tuple[int, Measurement]]) -> list[Outcome]:
    out = []
    for index, m in chunk:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                r = replay(m)
                sim = (r.ttft_ms, r.tpot_ms, r.refused)
            except DynosimError as exc:  # replay refuses with a reason; belt and braces
                sim = (float("nan"), float("nan"), str(exc))
        estimated = any(issubclass(w.category, EstimatedTimingWarning) for w in caught)
        out.append(Outcome(index, sim[0], sim[1], sim[2], estimated))
    return out


def _unmodelled(model: str) -> bool:
    """Hybrid linear attention (Gated DeltaNet layers): not timed as measured by AIC."""
    try:
        return model_spec(model).linear_layers > 0
    except DynosimError:
        return False


def arch(m: Measurement) -> str:
    """``dense``, ``moe`` or ``moe+adp`` (attention DP > 1 in the replica or a pool)."""
    try:
        moe = model_spec(m.model).is_moe
    except DynosimError:
        return "unknown"
    if not moe:
        return "dense"
    adp = max([m.attention_dp, *(p.attention_dp for p in m.pools or ())])
    return "moe+adp" if adp > 1 else "moe"


def reason(text: str) -> str:
    """A refusal reason with its numbers and key dumps blanked, so like reasons count together."""
    text = re.sub(r"(Moe|Context|Generation|Dsa)Key \{.*?\}", r"\1Key {...}", text)
    text = re.sub(r" at /\S+", "", text)
    return re.sub(r"\d+(\.\d+)?", "N", text)[:160]


def rows_to_replay(match: str, sample: int) -> list[Measurement]:
    """The aggregated rows and the disaggregated rows that parse, filtered and sampled."""
    seen: Counter[tuple[str, ...]] = Counter()
    chosen = []
    for m in read_measurements(silicon_csv()):
        if m.mode == "disagg" and m.pools is None:
            continue  # records no worker counts: its deployment is not determined
        if match not in "/".join(m.group):
            continue
        k = seen[m.group]
        seen[m.group] += 1
        if sample <= 1 or k % sample == 0:
            chosen.append(m)
    return chosen


def run(rows: Sequence[Measurement], jobs: int, progress: bool = True) -> list[Outcome]:
    """Replay ``rows`` on ``jobs`` processes; outcomes in the order of ``rows``."""
    tasks: list[list[tuple[int, Measurement]]] = []
    for i, m in enumerate(rows):
        if not tasks or len(tasks[-1]) >= CHUNK or tasks[-1][-1][1].group != m.group:
            tasks.append([])
        tasks[-1].append((i, m))
    done: list[Outcome] = []
    t0 = time.perf_counter()

    def tick(batch: list[Outcome]) -> None:
        before = len(done)
        done.extend(batch)
        if progress and (len(done) // 50 > before // 50 or len(done) == len(rows)):
            print(f"  {len(done):5d} / {len(rows)} rows, {time.perf_counter() - t0:5.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip

    if jobs <= 1:
        for t in tasks:
            tick(_replay_chunk(t))
    else:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for batch in pool.imap_unordered(_replay_chunk, tasks):
                tick(batch)
    return sorted(done, key=lambda o: o.index)


# ---- statistics ----------------------------------------------------------------------------


def _stats(pairs: Iterable[tuple[Measurement, Outcome]]) -> dict[str, Any]:
    """Rows, MAPE, median |error| and bias (%) of TTFT and TPOT, and median ratios."""
    items = [(m, o) for m, o in pairs if o.refused is None]
    out: dict[str, Any] = {"rows": len(items)}
    for metric in ("ttft", "tpot"):
        ratios = [
            (o.ttft_ms / m.ttft_ms if metric == "ttft" else o.tpot_ms / m.tpot_ms)
            for m, o in items
            if (m.ttft_ms if metric == "ttft" else m.tpot_ms) > 0
        ]
        errs = [r - 1.0 for r in ratios if not math.isnan(r)]
        out[f"{metric}_mape"] = 100 * statistics.fmean(map(abs, errs)) if errs else None
        out[f"{metric}_medae"] = 100 * statistics.median(map(abs, errs)) if errs else None
        out[f"{metric}_bias"] = 100 * statistics.fmean(errs) if errs else None
        out[f"{metric}_ratio"] = statistics.median(ratios) if ratios else None
    return out


def _row_key(m: Measurement) -> tuple[object, ...]:
    """What identifies a measurement whatever its model is called."""
    return (m.gpu, m.backend, m.mode, m.tp, m.ep, m.moe_tp, m.attention_dp, m.isl, m.osl,
            m.concurrency, m.ttft_ms, m.tpot_ms)  # fmt: skip


def _in_calibration(m: Measurement) -> bool:
    return m.mode == "agg" and (m.model, m.gpu, m.backend) in CALIBRATION_GROUPS


@functools.cache
def _calibration_keys() -> frozenset[tuple[object, ...]]:
    """The keys of every calibration row of the file (read once)."""
    rows = read_measurements(silicon_csv())
    return frozenset(_row_key(m) for m in rows if _in_calibration(m))


def copy_of_calibration(m: Measurement) -> str:
    """``copy of a calibration row`` for a held-out row that repeats one ("" otherwise)."""
    if _in_calibration(m) or _row_key(m) not in _calibration_keys():
        return ""
    return "copy of a calibration row"


def _gen(m: Measurement) -> str:
    return gpu_generation(m.gpu) or m.gpu


SLICES: dict[str, Callable[[Measurement], str]] = {
    "backend": lambda m: m.backend,
    "GPU generation": _gen,
    "architecture": arch,
    "mode": lambda m: m.mode,
    # vLLM with and without async scheduling (the release's default or the recipe's flag:
    # dynosim.validation.validate.overlapped); other backends: no such slice ("")
    "vLLM scheduling": lambda m: (
        f"vllm {'async' if overlapped(m) else 'sync'}" if m.backend == "vllm" else ""
    ),
    "held out by name only": copy_of_calibration,
    "speculative decoding": lambda m: str(m.speculative["method"]) if m.speculative else "",
}


def summarise(rows: Sequence[Measurement], outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Every figure of both sets as plain data (the ``--json`` payload)."""
    sets: dict[str, list[tuple[Measurement, Outcome]]] = {"calibration": [], "held-out": []}
    for m, o in zip(rows, outcomes, strict=True):
        sets["calibration" if _in_calibration(m) else "held-out"].append((m, o))
    data: dict[str, Any] = {}
    for name, pairs in sets.items():
        apart = {i for i, (m, o) in enumerate(pairs) if o.estimated or _unmodelled(m.model)}
        agg = [(m, o) for m, o in pairs if m.mode == "agg"]
        refused = Counter(reason(o.refused) for _, o in pairs if o.refused is not None)
        s: dict[str, Any] = {
            "rows": len(pairs),
            "agg_rows": len(agg),
            "agg_replayed": sum(o.refused is None for _, o in agg),
            "replayed": sum(o.refused is None for _, o in pairs),
            "refused": dict(refused.most_common()),
            "estimated": sum(o.estimated and o.refused is None for _, o in pairs),
            "unmodelled": sum(_unmodelled(m.model) and o.refused is None for m, o in pairs),
            "pooled_agg": _stats(agg),
            "pooled_agg_clean": _stats(
                p for i, p in enumerate(pairs) if p[0].mode == "agg" and i not in apart
            ),
            "apart": _stats(p for i, p in enumerate(pairs) if i in apart),
            "pooled_agg_unique": _stats(p for p in agg if not copy_of_calibration(p[0])),
        }
        s["slices"] = {
            title: {
                key: _stats(p for p in pairs if f(p[0]) == key)
                for key in sorted({f(m) for m, _ in pairs})
                if key
            }
            for title, f in SLICES.items()
        }
        s["buckets"] = {
            mode: {
                label: _stats(
                    p for p in pairs if p[0].mode == mode and lo <= p[0].concurrency <= hi
                )
                for label, lo, hi in BUCKETS
            }
            for mode in ("agg", "disagg")
        }
        groups: dict[tuple[str, ...], list[tuple[Measurement, Outcome]]] = {}
        for p in pairs:
            groups.setdefault(p[0].group, []).append(p)
        s["groups"] = [
            {"group": "/".join(g), "rows": len(ps),
             "refused": sum(o.refused is not None for _, o in ps),
             "apart": any(o.estimated for _, o in ps) or _unmodelled(g[0]), **_stats(ps)}
            for g, ps in groups.items()
        ]  # fmt: skip
        data[name] = s
    return data


# ---- printing ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, replay, print."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--sample", type=int, default=1, help="every N-th row of each group")
    p.add_argument("--match", default="", help="only groups whose name contains this")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--markdown", help="write the README summary table here")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.sample < 1:
        p.error("--jobs and --sample: allowed: an integer >= 1")
    t0 = time.perf_counter()
    rows = rows_to_replay(args.match, args.sample)
    outcomes = run(rows, args.jobs)
    data = summarise(rows, outcomes)
    elapsed = time.perf_counter() - t0
    sample = f", every {args.sample}-th row of each group" if args.sample > 1 else ""
    print(f"# fidelity: {len(rows)} rows{sample}, {args.jobs} jobs, {elapsed:.0f} s")
    print(report(data))
    print(summary_table(data))
    print(targets(data))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            per_row = [
                {"where": m.where, "group": "/".join(m.group), "concurrency": m.concurrency,
                 "measured_ttft_ms": m.ttft_ms, "measured_tpot_ms": m.tpot_ms,
                 "simulated_ttft_ms": o.ttft_ms if o.refused is None else None,
                 "simulated_tpot_ms": o.tpot_ms if o.refused is None else None,
                 "refused": o.refused, "estimated": o.estimated}
                for m, o in zip(rows, outcomes, strict=True)
            ]  # fmt: skip
            json.dump({"sample": args.sample, "match": args.match, "seconds": elapsed,
                       "sets": data, "rows": per_row}, f, indent=1)  # fmt: skip
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(summary_table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
