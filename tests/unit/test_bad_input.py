"""Issue 10, item 1: bad input is refused before running, with one line naming what is wrong."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, DynosimError, WorkloadError
from dynosim.files import load_deployment, parse_yaml
from dynosim.types import Request
from dynosim.workload import WorkloadSpec, load_trace, load_workload_file, speedup
from dynosim.workload.release import to_us
from search.study.space import Space
from search.study.study_file import load_study_file, parse_study
from tests.unit.search.fakes import SPACE, study_dict

BASE = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm"}
WORKLOAD: dict[str, Any] = {
    "requests": 10,
    "arrival": {"process": "poisson", "rate_rps": 2},
    "input_tokens": {"dist": "fixed", "value": 100},
    "output_tokens": {"dist": "fixed", "value": 10},
}


def _one_line(exc: pytest.ExceptionInfo[BaseException], *parts: str) -> None:
    message = str(exc.value)
    assert "\n" not in message
    for part in parts:
        assert part in message, message


# ------------------------------------------------------------------------------ finite numbers
@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("engine", "gpu_memory_utilization"),
        ("kv_router", "overlap_weight"),
        ("kv_router", "temperature"),
        ("slo", "ttft_ms"),
        ("slo", "itl_ms"),
        (None, "framework_overhead_us"),
        (None, "gpu_hour_usd"),
    ],
)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_deployment_floats_must_be_finite(section: str | None, field: str, value: float) -> None:
    data: dict[str, Any] = dict(BASE)
    if section is None:
        data[field] = value
    else:
        data[section] = {field: value}
    name = f"{section}.{field}" if section else field
    with pytest.raises(ConfigError, match="finite") as exc:
        DeploymentConfig.from_dict(data)
    assert exc.value.field == name


def test_space_float_knob_bounds_must_be_finite() -> None:
    knobs = {"kv_router.overlap_weight": {"type": "float", "low": math.nan, "high": 1.0}}
    with pytest.raises(ConfigError) as exc:
        Space.from_dict({"knobs": knobs})
    _one_line(exc, "knobs.kv_router.overlap_weight.low", "finite")


# ------------------------------------------------------------------------------ sizes and times
@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"requests": 1_000_000_000}, "requests"),
        ({"warmup_requests": 30_000_000}, "warmup_requests"),
        ({"input_tokens": {"dist": "fixed", "value": 10**12}}, "input_tokens.value"),
        ({"input_tokens": {"dist": "lognormal", "mean": 100, "sigma": 1000}}, "input_tokens.sigma"),
        ({"prefix": {"groups": 8, "tokens": 10**12}}, "prefix.tokens"),
        ({"sessions": {"turns": 10**9}}, "sessions.turns"),
        ({"sessions": {"turns": 2, "think_time_s": 1e300}}, "sessions.think_time_s"),
        ({"arrival": {"process": "poisson", "rate_rps": 1e-300}}, "arrival.rate_rps"),
        ({"arrival": {"process": "gamma", "rate_rps": 1, "cv": 1e-200}}, "arrival.cv"),
        ({"arrival": {"process": "closed_loop", "concurrency": 10**30}}, "arrival.concurrency"),
        ({"arrival": {"process": "closed_loop", "ramp_up_s": math.inf}}, "arrival.ramp_up_s"),
        ({"requests": 10_000_000, "input_tokens": {"dist": "fixed", "value": 100_000}}, "requests"),
        ({"prefix": {"tokens": 100}}, "prefix.groups"),
    ],
)
def test_workload_sizes_and_times_are_bounded(edit: dict[str, Any], field: str) -> None:
    data = {**copy.deepcopy(WORKLOAD), **edit}
    if field in ("arrival.concurrency", "arrival.ramp_up_s"):
        data["arrival"] = {"concurrency": 1, **edit["arrival"]}
    with pytest.raises(ConfigError) as exc:
        WorkloadSpec.from_dict(data)
    assert exc.value.field == field


def test_workload_request_limit_states_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps({**WORKLOAD, "requests": 1_000_000_000}))
    with pytest.raises(WorkloadError) as exc:
        load_workload_file(path)
    _one_line(exc, str(path), "requests: got 1000000000", "20,000,000", "1 KB of memory")


def test_speedup_and_us_refuse_times_beyond_range() -> None:
    requests = [Request(id=0, arrival_s=10.0, input_tokens=1, output_tokens=1)]
    with pytest.raises(ConfigError, match="speedup"):
        speedup(requests, 1e-300)
    for bad in (1e300, math.inf, math.nan):
        with pytest.raises(ConfigError, match="request time"):
            to_us(bad)
    assert to_us(1.5) == 1_500_000


@pytest.mark.parametrize(
    ("name", "text", "what"),
    [
        ("a.jsonl", '{"timestamp": 1e300, "input_length": 1, "output_length": 1, "hash_ids": [1]}',
         "timestamp must be < 1e+12 ms"),
        ("b.jsonl", '{"timestamp": 1700000000000000000, "input_length": 1, "output_length": 1,'
         ' "hash_ids": [1]}', "epoch"),
        ("c.jsonl", '{"timestamp": ' + "9" * 5000 + ', "input_length": 1, "output_length": 1}',
         "invalid JSON"),
        ("d.jsonl", '{"timestamp": ' + "9" * 400 + ', "input_length": 1, "output_length": 1,'
         ' "hash_ids": [1]}', "timestamp"),
        ("e.csv", "arrival_s,input_tokens,output_tokens\n1e15,1,1\n", "arrival_s must be < 1e+09"),
        ("f.csv", "arrival_s,input_tokens,output_tokens,input_tokens\n0,1,1,2\n",
         "column 'input_tokens' appears twice"),
        ("g.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,TIMESTAMP\n", "appears twice"),
        ("h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-01-01 00:00:00.\u00b2,1,1\n",
         "TIMESTAMP"),
        ("i.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1990-01-01 00:00:00,1,1\n"
         "2030-01-01 00:00:00,1,1\n", "31.7 years"),
    ],
)  # fmt: skip
def test_trace_readers_refuse_out_of_range_and_duplicates(
    tmp_path: Path, name: str, text: str, what: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(WorkloadError) as exc:
        load_trace(path)
    _one_line(exc, f"{path}:", what)


# ------------------------------------------------------------------------------ YAML
@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("tp: 1\ntp: 2\n", "duplicate key 'tp' (first given on line 1)"),
        ("engine: {max_num_seqs: 1, max_num_seqs: 2}\n", "duplicate key 'max_num_seqs'"),
        ("a: !!binary aGk=\n", "tag !!binary is not supported"),
        ("a: " + "[" * 200 + "]" * 200, "nested deeper than"),
        ("a: " + "1" * 5000, "a value Python cannot hold"),
    ],
)
def test_yaml_refuses_duplicates_and_non_json_data(tmp_path: Path, text: str, what: str) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(DynosimError) as exc:
        load_deployment(path)
    _one_line(exc, f"{path}:", what)


def test_yaml_keeps_dates_as_text_and_allows_merge_keys() -> None:
    assert parse_yaml("a: 2024-01-01") == {"a": "2024-01-01"}
    assert parse_yaml("x: &x {a: 1}\ny: {<<: *x, a: 2}") == {"x": {"a": 1}, "y": {"a": 2}}


def test_duplicate_keys_refused_in_workload_space_and_study(tmp_path: Path) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text("requests: 5\nrequests: 6\n")
    with pytest.raises(WorkloadError, match="duplicate key 'requests'"):
        load_workload_file(workload)
    space = tmp_path / "s.yaml"
    space.write_text(
        "knobs:\n  tp: {type: choice, values: [1]}\n  tp: {type: int, low: 1, high: 2}\n"
    )
    with pytest.raises(ConfigError, match="duplicate key 'tp'"):
        Space.from_yaml(space)
    study = tmp_path / "study.yaml"
    study.write_text(json.dumps(study_dict(tmp_path)).replace('"seed": 0', '"seed": 0, "seed": 1'))
    with pytest.raises(ConfigError, match="duplicate key 'seed'"):
        load_study_file(study)


# ------------------------------------------------------------------------------ spaces
def test_dead_when_conditions_are_refused() -> None:
    knobs: dict[str, Any] = copy.deepcopy(SPACE["knobs"])
    knobs["kv_router.overlap_weight"]["when"] = {"router": "kv_awar"}
    with pytest.raises(ConfigError) as exc:
        Space.from_dict({"knobs": knobs})
    _one_line(exc, "knobs.kv_router.overlap_weight.when.router", "round_robin | kv_aware")
    knobs = copy.deepcopy(SPACE["knobs"])
    knobs["kv_router.temperature"] = {
        "type": "float", "low": 0.0, "high": 1.0,
        "when": {"router": "round_robin", "kv_router.overlap_weight": 1.0},
    }  # fmt: skip
    with pytest.raises(ConfigError, match="never active"):
        Space.from_dict({"knobs": knobs})


# ------------------------------------------------------------------------------ studies
def _parse(tmp_path: Path, **fields: Any) -> Any:
    return parse_study(study_dict(tmp_path, **fields), base_dir=tmp_path)


def test_objectives_must_be_given_and_distinct(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="objectives: got \\[\\]"):
        _parse(tmp_path, objectives=[])
    twice = [
        {"metric": "output_token_throughput_per_user", "direction": "maximize"},
        {"metric": "output_token_throughput_per_user.avg", "direction": "minimize"},
    ]
    with pytest.raises(ConfigError, match=r"objectives\[1\].metric"):
        _parse(tmp_path, objectives=twice)
    assert len(_parse(tmp_path, objectives=None).problem.objectives) == 2  # absent: defaults


@pytest.mark.parametrize(
    ("deployment", "knob"),
    [({"router": "kv_aware"}, "router"), ({"engine": {"max_num_seqs": 64}}, "engine.max_num_seqs")],
)
def test_a_field_is_fixed_or_a_knob(tmp_path: Path, deployment: dict[str, Any], knob: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _parse(tmp_path, deployment=deployment)
    _one_line(exc, f"space.knobs.{knob}", "either a fixed field")


def test_model_as_a_knob_is_refused(tmp_path: Path) -> None:
    space = copy.deepcopy(SPACE)
    space["knobs"]["model"] = {"type": "choice", "values": ["a/b"]}
    with pytest.raises(ConfigError, match=r"space\.knobs\.model"):
        _parse(tmp_path, space=space)


def test_cli_overrides_do_not_hide_bad_file_values(tmp_path: Path) -> None:
    data = study_dict(tmp_path)
    data["budget"]["max_trials"] = -3
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"budget\.max_trials: got -3"):
        load_study_file(path, {"budget.max_trials": 5})
    data["budget"]["max_trials"] = 4
    path.write_text(json.dumps(data))
    assert load_study_file(path, {"budget.max_trials": 5}).budget.max_trials == 5
    with pytest.raises(ConfigError, match=r"budget\.max_trials: got -1"):
        load_study_file(path, {"budget.max_trials": -1})
    del data["name"]  # a flag may still fill what the file lacks
    path.write_text(json.dumps(data))
    assert load_study_file(path, {"name": "given"}).name == "given"


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ({"model": "nobody/no-such-model"}, "model"),
        ({"tp": {"type": "choice", "values": ["one", "two"]}}, "tp: got 'one'"),
        ({"engine.enable_prefix_caching": {"type": "int", "low": 0, "high": 1}},
         "engine.enable_prefix_caching: got"),
        ({"tp": {"type": "choice", "values": [16]}}, "exceeds the GPU budget"),
    ],
)  # fmt: skip
def test_a_study_no_configuration_of_which_can_run_is_refused(
    tmp_path: Path, edit: dict[str, Any], reason: str
) -> None:
    fields: dict[str, Any] = {"simulator": None}
    if "model" in edit and not isinstance(edit["model"], dict):
        fields["model"] = edit["model"]
    else:
        knobs = copy.deepcopy(SPACE["knobs"])
        knobs.update(edit)
        fields["space"] = {"knobs": knobs}
    with pytest.raises(DynosimError) as exc:
        _parse(tmp_path, **fields)
    _one_line(exc, "space: none of", "can run", reason)


def test_a_study_with_some_runnable_configurations_is_accepted(tmp_path: Path) -> None:
    knobs = copy.deepcopy(SPACE["knobs"])
    knobs["tp"] = {"type": "choice", "values": [1, 16]}  # 16 exceeds the budget; 1 runs
    assert _parse(tmp_path, simulator=None, space={"knobs": knobs}).problem.space.names
