"""Fuzzing every input the user writes: any input gives a result or a ``DynosimError``.

Targets: the trace readers (Mooncake JSONL, Azure CSV, generic CSV: random bytes, random JSON
objects with random field types, random CSV rows), deployment loading, workload loading, space
loading and study loading (random values grafted onto valid files, random YAML text). The runs
are derandomized with a bounded number of examples, so CI sees the same cases every time; the
number of cases each target ran is printed at the end of the session (see ``conftest.py``).
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynosim.config import DeploymentConfig
from dynosim.errors import DynosimError
from dynosim.files import load_deployment, parse_yaml
from dynosim.types import HASH_BLOCK_TOKENS, Request
from dynosim.workload import (
    TraceRef,
    WorkloadSpec,
    load_trace,
    load_trace_workload,
    load_workload_file,
    parse_workload_file,
)
from dynosim.workload.limits import MAX_TIME_S
from search.study.space import Space
from search.study.study_file import load_study_file, parse_study
from tests.fuzz._cases import count

T = TypeVar("T")
EXAMPLES = 200
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
WORK = Path(tempfile.mkdtemp(prefix="dynosim-fuzz-"))
"""Files the targets read (one folder for the session; hypothesis reuses it per example)."""


def outcome(target: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """``fn(*args)``, or None when it refuses the input with a DynosimError; count the case."""
    count(target)
    try:
        return fn(*args, **kwargs)
    except DynosimError as exc:
        message = str(exc)
    assert "\n" not in message, f"a multi-line message: {message!r}"
    return None


def write(name: str, content: str | bytes) -> Path:
    path = WORK / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    return path


def check_requests(requests: list[Request] | tuple[Request, ...]) -> None:
    """What every workload guarantees: ids in order, earlier dependencies, times in range."""
    for i, r in enumerate(requests):
        assert r.id == i
        assert r.after_id is None or r.after_id < r.id
        assert r.input_tokens >= 1
        assert r.output_tokens >= 1
        assert 0 <= r.arrival_s < MAX_TIME_S
        assert 0 <= r.delay_s < MAX_TIME_S


# ------------------------------------------------------------------------------ values
INTERESTING_NUMBERS = st.sampled_from(
    [0, 1, -1, 2, 3, 7, 64, 0.5, 1.5, -0.0, 1e-300, 1e300, 1e15, 1e9, 2**31, 2**63, 2**64,
     10**20, 10**400, math.nan, math.inf, -math.inf, 0.9, 1.0, 2000.0]
)  # fmt: skip
INTERESTING_TEXT = st.sampled_from(
    ["", " ", "vllm", "sglang", "kv_aware", "round_robin", "roofline", "aic", "bf16", "fp8",
     "poisson", "gamma", "closed_loop", "constant", "fixed", "uniform", "lognormal",
     "empirical", "choice", "int", "float", "maximize", "minimize", "grid", "random", "local",
     "ray", "sweep", "capacity", "input", "output", "\x00", "~nobody_at_all/x", "a:b", "1e3",
     "nan", "time_to_first_token.p90 <= 2000", "h200_sxm", "meta-llama/Llama-3.1-8B-Instruct",
     "x" * 300, "²", "１２"]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    INTERESTING_NUMBERS,
    st.floats(),
    st.text(max_size=12),
    INTERESTING_TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)
FIELD_NAMES = [
    "model", "gpu", "backend", "timing", "dtype", "tp", "workers", "router", "kv_router",
    "engine", "slo", "gpu_hour_usd", "framework_overhead_us", "overlap_weight", "temperature",
    "max_num_seqs", "max_num_batched_tokens", "block_size", "enable_prefix_caching",
    "enable_chunked_prefill", "gpu_memory_utilization", "ttft_ms", "itl_ms", "e2e_ms",
    "requests", "warmup_requests", "arrival", "process", "rate_rps", "cv", "concurrency",
    "ramp_up_s", "input_tokens", "output_tokens", "dist", "value", "low", "high", "mean",
    "sigma", "max", "trace", "field", "prefix", "groups", "tokens", "zipf_s", "sessions",
    "turns", "think_time_s", "seed", "name", "speedup", "max_requests", "knobs", "type",
    "values", "step", "log", "when", "grid", "description", "gpu_budget", "deployment",
    "workload", "space", "objectives", "constraints", "optimizer", "budget", "executor",
    "storage", "simulator", "load", "file", "metric", "direction", "mode", "levels",
    "max_trials", "engine.max_num_seqs", "kv_router.overlap_weight",
]  # fmt: skip
KEYS = st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=6))


def _slots(node: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) of a nested structure of dicts and lists."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield node, key
            yield from _slots(value)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield node, i
            yield from _slots(value)


@st.composite
def mutated(draw: st.DrawFn, bases: list[dict[str, Any]]) -> dict[str, Any]:
    """A valid base with up to three entries replaced, deleted or added."""
    data = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(0, 3))):  # 0: the valid base itself
        slots = [(data, None), *_slots(data)]
        container, key = draw(st.sampled_from(slots))
        op = draw(st.sampled_from(("set", "set", "set", "delete", "add")))
        if key is None or op == "add":
            target = container if isinstance(container, dict) else data
            target[draw(KEYS)] = draw(VALUES)
        elif op == "delete":
            del container[key]
        else:
            container[key] = draw(VALUES)
    return data


YAML_TEXT = st.text(
    alphabet=st.sampled_from([*"{}[]:,-&*!|>'\"#%@?~ \n\t.eE+0123456789abcxyz_", "\x00", "é"]),
    max_size=200,
)


# ------------------------------------------------------------------------------ traces
def _hashes(n_tokens: object) -> list[int]:
    if isinstance(n_tokens, int) and not isinstance(n_tokens, bool) and 0 < n_tokens < 10**5:
        return list(range(-(-n_tokens // HASH_BLOCK_TOKENS)))
    return [0]


TOKENS = st.one_of(st.integers(0, 5000), INTERESTING_NUMBERS, SCALARS)
TIMES = st.one_of(
    st.floats(0, 1e7), st.integers(0, 10**7), INTERESTING_NUMBERS, SCALARS,
    st.sampled_from([1.7e18, 1_700_000_000_000_000_000, 1.7e12, 10**400, 1e300, 1e15, -5, "12"]),
)  # fmt: skip


@st.composite
def mooncake_line(draw: st.DrawFn) -> str:
    """A valid Mooncake line, one with a field changed or dropped, or not an object at all."""
    kind = draw(st.sampled_from(("valid", "mutated", "mutated", "json", "garbage")))
    if kind == "garbage":
        return draw(st.text(max_size=40))
    if kind == "json":
        return json.dumps(draw(VALUES))
    n_in = draw(st.integers(1, 3000))
    first = draw(st.integers(0, 20))
    obj: dict[str, Any] = {
        "timestamp": draw(st.one_of(st.floats(0, 1e7), st.integers(0, 10**7))),
        "input_length": n_in,
        "output_length": draw(st.integers(1, 500)),
        "hash_ids": list(range(first, first - (-n_in // HASH_BLOCK_TOKENS))),
    }
    if draw(st.booleans()):
        obj["session_id"] = draw(st.one_of(st.integers(0, 3), st.sampled_from("ab")))
    if draw(st.booleans()):
        obj["delay"] = draw(st.floats(0, 1e4))
    if kind == "mutated":
        key = draw(st.sampled_from([*sorted(obj), "session_id", "delay", "x"]))
        if draw(st.integers(0, 4)):
            obj[key] = draw(st.one_of(TIMES, TOKENS, VALUES))
        else:
            obj.pop(key, None)
    return json.dumps(obj)


VALID_CELL = {
    "TIMESTAMP": st.datetimes().map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S.%f")),
    "arrival_s": st.floats(0, 1e6).map(repr),
    "ContextTokens": st.integers(1, 5000).map(str),
    "input_tokens": st.integers(1, 500).map(str),
    "GeneratedTokens": st.integers(1, 500).map(str),
    "output_tokens": st.integers(1, 500).map(str),
    "session_id": st.sampled_from(["", "s1", "s2", "3"]),
    "delay_s": st.sampled_from(["", "0", "0.5", "12"]),
    "hash_ids": st.just(""),
}
CELL = st.one_of(
    st.integers(-5, 5000).map(str),
    st.floats(0, 1e6).map(repr),
    INTERESTING_NUMBERS.map(str),
    st.text(max_size=8),
    st.sampled_from(["", " ", '"', '"a,b"', "1|2", "0 1 2", "2024-01-01 00:00:00.1234567",
                     "2024-13-01 00:00:00", "2024-01-01 25:00:00", "2024-01-01 00:00:00.１２",
                     "2024-01-01T00:00:01", "2024-01-01 00:00:00.²", "1e15", "1.7e18", "\x00"]),
)  # fmt: skip


@st.composite
def csv_text(draw: st.DrawFn, columns: list[str]) -> str:
    """A header with the format's columns (maybe more, maybe repeated) and rows of cells."""
    header = list(columns)
    extra = [*columns, "session_id", "delay_s", "hash_ids", "x"]
    header.extend(draw(st.lists(st.sampled_from(extra), max_size=2)))
    header = draw(st.permutations(header))
    rows = [",".join(header)]
    for _ in range(draw(st.integers(0, 6))):
        cells = [draw(VALID_CELL.get(name, CELL)) for name in header]
        if draw(st.integers(0, 2)) == 0:
            cells[draw(st.integers(0, len(cells) - 1))] = draw(CELL)
        if draw(st.integers(0, 9)) == 0:
            cells = cells[: draw(st.integers(0, len(cells)))]
        rows.append(",".join(cells))
    return "\n".join(rows) + ("\n" if draw(st.booleans()) else "")


@FUZZ
@given(content=st.binary(max_size=600))
def test_trace_random_bytes(content: bytes) -> None:
    result = outcome("trace: random bytes", load_trace, write("bytes.trace", content))
    if result is not None:
        check_requests(result)


@FUZZ
@given(lines=st.lists(mooncake_line(), min_size=1, max_size=6))
def test_trace_mooncake(lines: list[str]) -> None:
    result = outcome("trace: mooncake jsonl", load_trace, write("m.jsonl", "\n".join(lines)))
    if result is not None:
        check_requests(result)


@FUZZ
@given(text=csv_text(["TIMESTAMP", "ContextTokens", "GeneratedTokens"]))
def test_trace_azure_csv(text: str) -> None:
    result = outcome("trace: azure csv", load_trace, write("azure.csv", text))
    if result is not None:
        check_requests(result)


@FUZZ
@given(
    text=csv_text(["arrival_s", "input_tokens", "output_tokens"]),
    speedup=st.one_of(st.just(1.0), st.floats(), INTERESTING_NUMBERS),
    max_requests=st.one_of(st.none(), st.integers(-1, 10), INTERESTING_NUMBERS),
)
def test_trace_generic_csv(text: str, speedup: Any, max_requests: Any) -> None:
    path = write("generic.csv", text)
    result = outcome("trace: generic csv", load_trace, path)
    if result is not None:
        check_requests(result)
        loaded = outcome(
            "trace: generic csv + transforms",
            load_trace_workload,
            path,
            speedup=speedup,
            max_requests=max_requests,
        )
        if loaded is not None:
            check_requests(loaded.requests)


# ------------------------------------------------------------------------------ deployments
DEPLOYMENTS: list[dict[str, Any]] = [
    {
        "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "backend": "vllm",
        "timing": "roofline", "dtype": "bf16", "tp": 2, "workers": 4, "router": "kv_aware",
        "kv_router": {"overlap_weight": 1.0, "temperature": 0.0},
        "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 64,
                   "enable_prefix_caching": True, "enable_chunked_prefill": True,
                   "gpu_memory_utilization": 0.9},
        "slo": {"ttft_ms": 2000, "itl_ms": 50, "e2e_ms": None},
        "gpu_hour_usd": 3.5, "framework_overhead_us": 4000,
    },
    {"model": "Qwen/Qwen3-32B", "gpu": "h100_sxm"},
]  # fmt: skip


@FUZZ
@given(data=st.one_of(mutated(DEPLOYMENTS), VALUES))
def test_deployment_from_dict(data: Any) -> None:
    config = outcome("deployment: from_dict", DeploymentConfig.from_dict, data)
    if config is not None:
        assert DeploymentConfig.from_dict(config.to_dict()) == config
        for name in ("gpu_hour_usd", "framework_overhead_us"):
            value = getattr(config, name)
            assert value is None or math.isfinite(value)
        assert math.isfinite(config.engine.gpu_memory_utilization)


@FUZZ
@given(text=st.one_of(YAML_TEXT, mutated(DEPLOYMENTS).map(yaml.safe_dump)))
def test_deployment_yaml_file(text: str) -> None:
    outcome("deployment: yaml file", load_deployment, write("deployment.yaml", text))


# ------------------------------------------------------------------------------ workloads
WORKLOADS: list[dict[str, Any]] = [
    {
        "requests": 20, "warmup_requests": 2,
        "arrival": {"process": "poisson", "rate_rps": 8},
        "input_tokens": {"dist": "lognormal", "mean": 600, "sigma": 0.5, "max": 4000},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 50},
        "prefix": {"groups": 3, "tokens": 1024, "zipf_s": 1.1},
        "sessions": {"turns": 3, "think_time_s": 1.0}, "seed": 1, "name": "w",
    },
    {
        "requests": 10,
        "arrival": {"process": "closed_loop", "concurrency": 4, "ramp_up_s": 1.0},
        "input_tokens": {"dist": "fixed", "value": 100},
        "output_tokens": {"dist": "empirical", "trace": "generic.csv", "field": "output"},
    },
    {
        "requests": 10,
        "arrival": {"process": "gamma", "rate_rps": 2, "cv": 3},
        "input_tokens": {"dist": "fixed", "value": 700},
        "output_tokens": {"dist": "fixed", "value": 3},
    },
    {"trace": "generic.csv", "speedup": 2.0, "max_requests": 5, "warmup_requests": 1},
]  # fmt: skip
GENERIC_TRACE = "arrival_s,input_tokens,output_tokens\n0,100,10\n0.5,600,20\n1.0,30,5\n"


def _small(spec: WorkloadSpec) -> bool:
    """Whether generating ``spec`` is cheap enough for a fuzz case."""
    n = spec.requests + spec.warmup_requests
    biggest = max(getattr(spec.input_tokens, k) or 0 for k in ("value", "high", "mean", "max"))
    turns = spec.sessions.turns if spec.sessions is not None else 1
    prefix = spec.prefix.groups * spec.prefix.tokens if spec.prefix is not None else 0
    return n <= 500 and biggest * min(turns, n) <= 10**5 and prefix <= 10**6


@FUZZ
@given(data=st.one_of(mutated(WORKLOADS), VALUES))
def test_workload_from_dict(data: Any) -> None:
    write("generic.csv", GENERIC_TRACE)
    spec = outcome("workload: from_dict", WorkloadSpec.from_dict, data, base_dir=WORK)
    assert spec is None or isinstance(spec, WorkloadSpec)


@FUZZ
@given(data=st.one_of(mutated(WORKLOADS).map(yaml.safe_dump), YAML_TEXT))
def test_workload_yaml_file(data: str) -> None:
    write("generic.csv", GENERIC_TRACE)
    path = write("workload.yaml", data)
    parsed = outcome("workload: parse file", parse_workload_file, path)
    small = isinstance(parsed, TraceRef) or (isinstance(parsed, WorkloadSpec) and _small(parsed))
    if small:
        loaded = outcome("workload: load file", load_workload_file, path)
        if loaded is not None:
            check_requests(loaded.requests)


# ------------------------------------------------------------------------------ spaces
SPACES: list[dict[str, Any]] = [
    {
        "description": "fuzz",
        "knobs": {
            "tp": {"type": "choice", "values": [1, 2, 4, 8]},
            "router": {"type": "choice", "values": ["round_robin", "kv_aware"]},
            "kv_router.overlap_weight": {"type": "float", "low": 0.0, "high": 2.0, "step": 0.5,
                                         "when": {"router": "kv_aware"}},
            "engine.max_num_seqs": {"type": "int", "low": 16, "high": 256, "log": True,
                                    "grid": [16, 64, 256]},
            "engine.gpu_memory_utilization": {"type": "float", "low": 0.8, "high": 0.95},
            "engine.enable_prefix_caching": {"type": "choice", "values": [True, False]},
        },
    },
]  # fmt: skip


@FUZZ
@given(data=st.one_of(mutated(SPACES), VALUES))
def test_space_from_dict(data: Any) -> None:
    space = outcome("space: from_dict", Space.from_dict, data, "fuzz.yaml")
    if space is not None:
        import numpy as np

        rng = np.random.default_rng(0)
        for _ in range(5):
            space.validate(space.sample(rng))
        bound = space.grid_bound()
        if bound is not None and bound <= 200:
            for point in space.grid():
                space.validate(point)


@FUZZ
@given(text=st.one_of(mutated(SPACES).map(yaml.safe_dump), YAML_TEXT))
def test_space_yaml_file(text: str) -> None:
    outcome("space: yaml file", Space.from_yaml, write("space.yaml", text))


# ------------------------------------------------------------------------------ studies
def _study(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "fuzz",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "h200_sxm",
        "gpu_budget": 8,
        "deployment": {"timing": "roofline", "slo": {"ttft_ms": 2000}},
        "workload": {"file": "workload_ok.yaml"},
        "space": copy.deepcopy(SPACES[0]),
        "objectives": [
            {"metric": "output_token_throughput_per_gpu", "direction": "maximize"},
            {"metric": "time_to_first_token.p90", "direction": "minimize"},
        ],
        "constraints": ["time_to_first_token.p90 <= 2000"],
        "optimizer": {"name": "optuna-nsga2", "population": 8},
        "budget": {"max_trials": 10, "tol": 0.001, "patience": 3},
        "executor": {"kind": "local"},
        "storage": str(WORK / "fuzz.journal"),
        "seed": 0,
    }
    data.update(fields)
    return data


STUDIES = [
    _study(),
    _study(simulator="tests.unit.search.fakes:simulate", load={"mode": "capacity"}),
    _study(load={"mode": "sweep", "levels": [1, 2]}, workload={"trace": "generic.csv"}),
]
WORKLOAD_OK = "requests: 5\narrival: {process: poisson, rate_rps: 2}\n" + (
    "input_tokens: {dist: fixed, value: 10}\noutput_tokens: {dist: fixed, value: 2}\n"
)


@FUZZ
@given(data=st.one_of(mutated(STUDIES), VALUES))
def test_study_parse(data: Any) -> None:
    write("workload_ok.yaml", WORKLOAD_OK)
    write("generic.csv", GENERIC_TRACE)
    if not isinstance(data, dict):
        data = {"study": data}
    outcome("study: parse_study", parse_study, data, "fuzz.yaml", WORK)


@FUZZ
@given(
    text=st.one_of(mutated(STUDIES).map(yaml.safe_dump), YAML_TEXT),
    n_trials=st.one_of(st.none(), st.integers(-3, 20)),
)
def test_study_yaml_file(text: str, n_trials: int | None) -> None:
    write("workload_ok.yaml", WORKLOAD_OK)
    write("generic.csv", GENERIC_TRACE)
    path = write("study.yaml", text)
    outcome("study: yaml file", load_study_file, path, {"budget.max_trials": n_trials})


def test_yaml_parser_is_json_like() -> None:
    """The strict loader's types are JSON's (dates stay text), and it refuses duplicates."""
    assert parse_yaml("a: 2024-01-01\nb: [1, 2.5, true, null]") == {
        "a": "2024-01-01",
        "b": [1, 2.5, True, None],
    }
