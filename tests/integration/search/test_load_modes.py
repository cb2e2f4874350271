"""Load modes with the real simulator: sweep points and capacities are what ``simulate`` says."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import yaml

from dynosim import DeploymentConfig, simulate
from dynosim.slo_monitor import LatencyBound, SLOMonitor
from dynosim.workload import WorkloadSpec, generate, load_trace
from search.run.driver import run_study
from search.store.open import open_storage
from search.study.load import LEVEL_KNOB
from search.study.study_file import load_study_file
from search.study.workload import load_workload
from tests.conftest import TRACES

CHAT = {
    "requests": 60,
    "warmup_requests": 4,
    "arrival": {"process": "closed_loop", "concurrency": 4},
    "input_tokens": {"dist": "uniform", "low": 200, "high": 2000},
    "output_tokens": {"dist": "uniform", "low": 20, "high": 120},
    "prefix": {"groups": 2, "tokens": 1024},
    "seed": 1,
}


def _study(tmp_path: Path, **fields: Any) -> Path:
    data: dict[str, Any] = {
        "name": "modes",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "h200_sxm",
        "gpu_budget": 4,
        "deployment": {"backend": "vllm", "timing": "aic"},
        "workload": {"file": "chat.yaml"},
        "space": {"knobs": {"tp": {"type": "choice", "values": [1, 2]}}},
        "objectives": [
            {"metric": "output_token_throughput_per_gpu", "direction": "maximize"},
            {"metric": "output_token_throughput_per_user", "direction": "maximize"},
        ],
        "constraints": ["time_to_first_token.p90 <= 1500"],
        "optimizer": {"name": "grid"},
        "budget": {"max_trials": 20, "tol": 0.0, "patience": 100},
        "executor": {"kind": "local"},
        "storage": str(tmp_path / "s.journal"),
    }
    data.update(fields)
    (tmp_path / "chat.yaml").write_text(yaml.safe_dump(CHAT))
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _trials(name: str, storage: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=open_storage(storage)).trials


def _same(stored: dict[str, float], metrics: Any) -> None:
    fresh = metrics.flat()
    for key, value in fresh.items():
        if key in ("wall_s", "speedup"):
            continue
        assert stored[key] == value or (math.isnan(value) and math.isnan(stored[key])), key


def test_sweep_points_equal_separate_simulations(tmp_path: Path) -> None:
    sf = load_study_file(_study(tmp_path, load={"mode": "sweep", "levels": [2, 8]}))
    requests, warmup, name = load_workload(sf.workload, sf.load)
    run_study(sf, requests, warmup_requests=warmup, workload_name=name)
    ts = _trials("modes", sf.storage)
    assert len(ts) == 4  # 2 tp x 2 levels
    spec = WorkloadSpec.from_dict(CHAT)
    for t in ts:
        level = int(t.params[LEVEL_KNOB])
        at_level = replace(spec, arrival=replace(spec.arrival, concurrency=level))
        config = DeploymentConfig.from_dict(t.user_attrs["config"])
        fresh = simulate(config, generate(at_level), warmup_requests=4)
        _same(t.user_attrs["metrics"], fresh)
        assert t.user_attrs["metrics"]["load_level"] == level


def test_capacity_trial_is_the_full_run_at_its_capacity(tmp_path: Path) -> None:
    trace = TRACES / "mooncake" / "conversation_trace.jsonl"
    if not trace.exists():
        import pytest

        pytest.skip(f"{trace} is absent")
    path = _study(
        tmp_path,
        workload={"trace": str(trace), "max_requests": 300, "warmup_requests": 20},
        load={"mode": "capacity", "tolerance": 0.1},
        objectives=[{"metric": "capacity_rps", "direction": "maximize"}],
        constraints=["time_to_first_token.p90 <= 1500"],
        space={"knobs": {"router": {"type": "choice", "values": ["round_robin", "kv_aware"]}}},
    )
    sf = load_study_file(path)
    requests, warmup, name = load_workload(sf.workload, sf.load)
    run_study(sf, requests, warmup_requests=warmup, workload_name=name)
    raw = load_trace(trace)[:300]
    monitor = SLOMonitor(
        bounds=(LatencyBound(metric="time_to_first_token", stat="p90", bound_ms=1500),)
    )
    feasible = 0
    for t in _trials("modes", sf.storage):
        m = t.user_attrs["metrics"]
        config = DeploymentConfig.from_dict(t.user_attrs["config"])
        level = m["load_level"]
        if not t.user_attrs["feasible"]:  # even the lowest load tried breaks the SLO
            assert t.user_attrs["infeasible_reason"].startswith("no load meets the SLO")
            lowest = simulate(config, raw, warmup_requests=20, speedup=level)
            assert lowest.time_to_first_token.p90 > 1500
            assert m["capacity_rps"] == 0
            continue
        feasible += 1
        at = simulate(config, raw, warmup_requests=20, speedup=level)
        _same(m, at)
        assert at.time_to_first_token.p90 <= 1500
        assert m["capacity_rps"] == at.request_throughput
        # One grid step above (tolerance 10%), the SLO breaks: the monitor says so.
        above = simulate(config, raw, warmup_requests=20, speedup=level * 1.1, stop=monitor)
        full_above = simulate(config, raw, warmup_requests=20, speedup=level * 1.1)
        assert full_above.time_to_first_token.p90 > 1500
        assert above.early_stop is not None or above.time_to_first_token.p90 > 1500
    assert feasible
