"""Fuzzing the inputs added since issue 10 (issue 23): any input gives a result or one line.

Targets: measurement files (plain CSV, silicon CSV, AIPerf JSON and CSV, vLLM bench JSON,
random bytes), Hugging Face ``config.json`` files, calibration profiles, disaggregated /
planner / speculative / KV-transfer deployment sections, the study's ``load:`` section and the
workload file ``export`` re-reads. Every accepted input is checked against the bounds it must
respect (:mod:`dynosim.workload.limits`), so a value that slips through a check fails here.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from dynosim.config import DeploymentConfig
from dynosim.perf.calibration import DEFAULT_PROFILE, load_profile
from dynosim.perf.model_config import MAX_CONFIG_INT, load_config_file
from dynosim.validation.measurements import PLAIN_FIELDS, read_measurements
from dynosim.workload.limits import MAX_CLIENTS, MAX_TOKENS
from search.cli.study.export import read_workload_spec
from search.study.load import MAX_LEVEL, MAX_LEVELS, MIN_LEVEL, MIN_TOLERANCE, LoadSpec
from tests.fuzz.test_fuzz_inputs import (
    CELL,
    FUZZ,
    INTERESTING_NUMBERS,
    VALUES,
    WORKLOADS,
    YAML_TEXT,
    mutated,
    outcome,
    write,
)
from tests.unit.test_bad_input_23 import DEEPSEEK, LLAMA  # the same two configs

CONTEXT = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "backend": "vllm",
           "tp": 1}  # fmt: skip
NUMBER_CELL = st.one_of(
    CELL,
    st.integers(-3, 10**6).map(str),
    st.sampled_from(["0", "-1", "inf", "-inf", "nan", "1e308", "9" * 50, "4.5", "65537"]),
)


def check_points(points: list[Any] | None) -> None:
    """What every accepted measurement guarantees (the bounds of ``check_point``)."""
    for m in points or []:
        assert 1 <= m.concurrency <= MAX_CLIENTS
        assert 1 <= m.isl <= MAX_TOKENS
        assert 1 <= m.osl <= MAX_TOKENS
        assert m.tp >= 1
        assert math.isfinite(m.ttft_ms)
        assert m.ttft_ms > 0
        assert math.isfinite(m.tpot_ms)
        assert m.tpot_ms >= 0


@st.composite
def measurement_csv(draw: st.DrawFn, columns: list[str], valid: list[str]) -> str:
    """A header (maybe with extra or repeated columns) and rows, some cells or lengths wrong."""
    header = list(columns) + draw(st.lists(st.sampled_from([*columns, "x", "dtype"]), max_size=2))
    header = draw(st.permutations(header))
    values = dict(zip(columns, valid, strict=True))
    rows = [",".join(header)]
    for _ in range(draw(st.integers(0, 4))):
        cells = [values.get(name, "") for name in header]
        if draw(st.integers(0, 2)):
            cells[draw(st.integers(0, len(cells) - 1))] = draw(NUMBER_CELL)
        if draw(st.integers(0, 9)) == 0:
            cells = cells[: draw(st.integers(0, len(cells)))]
        if draw(st.integers(0, 9)) == 0:
            cells.append(draw(NUMBER_CELL))
        rows.append(",".join(cells))
    return "\n".join(rows) + "\n"


PLAIN_VALID = ["meta-llama/Llama-3.1-8B-Instruct", "h200_sxm", "vllm", "1", "100", "10", "4",
               "20", "5"]  # fmt: skip
SILICON_COLUMNS = ["model_path", "system", "backend", "mode", "isl", "osl", "batch_size",
                   "tp_size", "silicon_ttft_ms", "silicon_tpot_ms",
                   "silicon_data_source"]  # fmt: skip
SILICON_VALID = ["meta-llama/Llama-3.1-8B-Instruct", "h200_sxm", "vllm", "agg", "100", "10", "4",
                 "1", "20", "5", "x"]  # fmt: skip
AIPERF: dict[str, Any] = {
    "time_to_first_token": {"unit": "ms", "avg": 20.0},
    "inter_token_latency": {"unit": "ms", "avg": 5.0},
    "input_sequence_length": {"unit": "tokens", "avg": 100.0},
    "output_sequence_length": {"unit": "tokens", "avg": 10.0},
    "input_config": {"loadgen": {"concurrency": 4},
                     "endpoint": {"model_names": ["meta-llama/Llama-3.1-8B-Instruct"]}},
}  # fmt: skip
VLLM: dict[str, Any] = {
    "model_id": "meta-llama/Llama-3.1-8B-Instruct", "completed": 16, "max_concurrency": 4,
    "total_input_tokens": 1600, "total_output_tokens": 160, "mean_ttft_ms": 20.0,
    "mean_tpot_ms": 5.0,
}  # fmt: skip


def _read(name: str, text: str | bytes, context: dict[str, Any] | None = None) -> None:
    check_points(
        outcome(name, read_measurements, write(name.rsplit(": ", maxsplit=1)[-1], text), context)
    )


@FUZZ
@given(text=measurement_csv(list(PLAIN_FIELDS), PLAIN_VALID))
def test_measurements_plain_csv(text: str) -> None:
    _read("measurements: plain.csv", text)


@FUZZ
@given(text=measurement_csv(SILICON_COLUMNS, SILICON_VALID))
def test_measurements_silicon_csv(text: str) -> None:
    _read("measurements: silicon.csv", text)


@FUZZ
@given(data=st.one_of(mutated([AIPERF, VLLM]), VALUES), concurrency=st.one_of(
    st.none(), INTERESTING_NUMBERS, st.integers(-2, 10**9)))  # fmt: skip
def test_measurements_tool_json(data: Any, concurrency: Any) -> None:
    context = {**CONTEXT, "concurrency": concurrency}
    _read("measurements: tool.json", json.dumps(data), context)


@FUZZ
@given(rows=st.lists(st.tuples(st.sampled_from(["Time to First Token (ms)",
       "Inter Token Latency (ms)", "Input Sequence Length (tokens)",
       "Output Sequence Length (tokens)", "x", ""]), NUMBER_CELL), max_size=6))  # fmt: skip
def test_measurements_aiperf_csv(rows: list[tuple[str, str]]) -> None:
    text = "Metric,avg,min\nTime to First Token (ms),20,1\n" + "".join(
        f"{name},{cell},1\n" for name, cell in rows
    )
    _read("measurements: aiperf.csv", text, {**CONTEXT, "concurrency": 4})


@FUZZ
@given(content=st.binary(max_size=400))
def test_measurements_random_bytes(content: bytes) -> None:
    _read("measurements: bytes.csv", content)


# ------------------------------------------------------------------------------ HF configs
HF_NUMBERS = st.one_of(INTERESTING_NUMBERS, st.integers(-5, 10**6), st.just(int("9" * 1000)))


@st.composite
def hf_config(draw: st.DrawFn) -> dict[str, Any]:
    data = copy.deepcopy(draw(st.sampled_from([LLAMA, DEEPSEEK])))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(data)))
        data[key] = draw(st.one_of(HF_NUMBERS, VALUES))
    return data


@FUZZ
@given(data=st.one_of(hf_config(), VALUES))
def test_hf_config_file(data: Any) -> None:
    path = write("config.json", json.dumps(data))
    load_config_file.cache_clear()
    spec = outcome("hf: config.json", load_config_file, str(path))
    if spec is not None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab"):
            assert 1 <= getattr(spec, name) <= MAX_CONFIG_INT
        assert 0 <= spec.dense_layers <= spec.layers
        assert spec.q_lora_rank >= 0


# ------------------------------------------------------------------------------ profiles
PROFILE = yaml.safe_load(DEFAULT_PROFILE.read_text())


@FUZZ
@given(data=st.one_of(mutated([PROFILE]), VALUES))
def test_calibration_profile(data: Any) -> None:
    text = yaml.safe_dump(data) if isinstance(data, dict) else json.dumps(data)
    outcome("profile: yaml file", load_profile, write("profile.yaml", text))


# ------------------------------------------------------------------------------ deployments
SECTIONS: list[dict[str, Any]] = [
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "backend": "vllm",
     "mode": "disagg", "prefill": {"tp": 1, "workers": 1}, "decode": {"tp": 1, "workers": 2},
     "kv_transfer": {"link": "rdma", "gbps": 400, "latency_us": 50},
     "planner": {"adjustment_interval_s": 30, "metric_pulling_interval_s": 1,
                 "min_workers": 1, "max_workers": 4}},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm",
     "speculative": {"method": "draft", "draft_model": "Qwen/Qwen3-0.6B", "acceptance": 0.6,
                     "num_speculative_tokens": 3}},
]  # fmt: skip


@FUZZ
@given(data=mutated(SECTIONS))
def test_deployment_sections(data: Any) -> None:
    config = outcome("deployment: disagg/planner/spec", DeploymentConfig.from_dict, data)
    if config is not None and config.planner is not None:
        assert config.planner.metric_pulling_interval_s >= 0.01
        assert config.planner.adjustment_interval_s >= 0.01
    if config is not None and config.kv_transfer is not None and config.kv_transfer.gbps:
        assert config.kv_transfer.gbps >= 0.1


# ------------------------------------------------------------------------------ load, export
LOADS: list[dict[str, Any]] = [
    {"mode": "capacity", "tolerance": 0.05, "start": 4, "min": 1, "max": 64, "max_probes": 24},
    {"mode": "sweep", "levels": [1, 2, 4, 8]},
]


@FUZZ
@given(data=st.one_of(mutated(LOADS), VALUES))
def test_load_section(data: Any) -> None:
    spec = outcome("load: section", LoadSpec.from_dict, data)
    if spec is not None:
        assert len(spec.levels) <= MAX_LEVELS
        assert all(MIN_LEVEL <= v <= MAX_LEVEL for v in spec.levels)
        assert MIN_TOLERANCE <= spec.tolerance < 1
        for v in (spec.start, spec.min, spec.max):
            assert v is None or MIN_LEVEL <= v <= MAX_LEVEL


@FUZZ
@given(text=st.one_of(mutated(WORKLOADS).map(yaml.safe_dump), YAML_TEXT, st.binary(max_size=60)))
def test_export_rereads_workload(text: str | bytes) -> None:
    path = write("exported.yaml", text)
    outcome("export: workload file", read_workload_spec, {"workload": {"file": str(path)}})
