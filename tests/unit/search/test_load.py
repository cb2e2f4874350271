"""Load modes: validation of ``load:``, the axis of a workload, sweeps and right-sizing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from dynosim.errors import ConfigError
from search.run.capacity import slo_monitor
from search.run.driver import run_study
from search.store.open import open_storage
from search.study.load import LEVEL_KNOB, LoadSpec, load_axis
from search.study.objectives import Constraint
from tests.unit.search import fakes

CHAT = """
requests: 40
arrival: {process: closed_loop, concurrency: 8}
input_tokens: {dist: fixed, value: 512}
output_tokens: {dist: fixed, value: 64}
"""


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"mode": "peak"}, "load.mode"),
        ({"mode": "sweep"}, "load.levels"),
        ({"mode": "sweep", "levels": [4, 2]}, "load.levels"),
        ({"mode": "sweep", "levels": [1, float("nan")]}, "load.levels[1]"),
        ({"mode": "capacity", "levels": [1, 2]}, "load.levels"),
        ({"mode": "capacity", "tolerance": 0}, "load.tolerance"),
        ({"mode": "capacity", "tolerance": 1.5}, "load.tolerance"),
        ({"mode": "capacity", "min": 4, "max": 2}, "load.max"),
        ({"mode": "capacity", "start": 9, "max": 8}, "load.start"),
        ({"mode": "capacity", "early_stop": "yes"}, "load.early_stop"),
        ({"mode": "capacity", "max_probes": 1}, "load.max_probes"),
        ({"mode": "capacity", "speed": 2}, "load.speed"),
    ],
)
def test_bad_load_sections_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        LoadSpec.from_dict(raw)
    assert err.value.field == field


def test_early_stop_defaults_follow_the_mode() -> None:
    assert LoadSpec.from_dict({"mode": "capacity"}).stops_early
    assert not LoadSpec.from_dict(None).stops_early
    assert LoadSpec.from_dict({"mode": "sweep", "levels": [1], "early_stop": True}).stops_early


def test_axis_of_each_workload_kind(tmp_path: Path) -> None:
    assert load_axis({"trace": "t.jsonl", "speedup": 2.5}).kind == "speedup"
    (tmp_path / "chat.yaml").write_text(CHAT)
    axis = load_axis({"file": str(tmp_path / "chat.yaml")})
    assert (axis.kind, axis.base) == ("concurrency", 8.0)
    requests, speedup = axis.workload_at(16, ())
    assert speedup == 1.0
    assert len(requests) == 40
    assert sum(r.after_id is None for r in requests) == 16  # 16 clients start at once
    (tmp_path / "open.yaml").write_text(
        CHAT.replace("closed_loop, concurrency: 8", "poisson, rate_rps: 4")
    )
    axis = load_axis({"file": str(tmp_path / "open.yaml")})
    assert (axis.kind, axis.base) == ("rate_rps", 4.0)
    slow, _ = axis.workload_at(4, ())
    fast, _ = axis.workload_at(8, ())
    # The same requests, sent twice as fast (coupled levels).
    assert [r.input_tokens for r in slow] == [r.input_tokens for r in fast]
    assert fast[-1].arrival_s == pytest.approx(slow[-1].arrival_s / 2)


def test_monitor_takes_only_the_constraints_it_can_stop_on() -> None:
    cons = [
        Constraint.parse("time_to_first_token.p90 <= 2000", "c"),
        Constraint.parse("inter_token_latency.avg <= 40", "c"),
        Constraint.parse("output_token_throughput_per_gpu >= 100", "c"),
        Constraint.parse("slo_attainment >= 0.9", "c"),
    ]
    monitor = slo_monitor(cons)
    assert monitor is not None
    assert [str(b) for b in monitor.bounds] == [
        "time_to_first_token.p90 <= 2000",
        "inter_token_latency.avg <= 40",
    ]
    assert monitor.min_attainment == 0.9
    assert slo_monitor(cons[2:3]) is None


def test_capacity_metrics_need_capacity_mode(tmp_path: Path) -> None:
    objectives = [{"metric": "capacity_rps", "direction": "maximize"}]
    with pytest.raises(ConfigError, match=r"load\.mode"):
        fakes.study(tmp_path, objectives=objectives, workload={"trace": "t.jsonl"})
    sf = fakes.study(
        tmp_path, objectives=objectives, workload={"trace": "t.jsonl"}, load={"mode": "capacity"}
    )
    assert sf.load.mode == "capacity"
    assert sf.data["load"]["axis"] == "speedup"


def test_the_level_knob_is_the_sweeps_own(tmp_path: Path) -> None:
    space = {"knobs": {**fakes.SPACE["knobs"], LEVEL_KNOB: {"type": "choice", "values": [1]}}}
    with pytest.raises(ConfigError, match=LEVEL_KNOB):
        fakes.study(tmp_path, space=space, workload={"trace": "t.jsonl"})


def _trials(sf: Any) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=sf.name, storage=open_storage(sf.storage)).trials


def test_sweep_runs_every_config_at_every_level(tmp_path: Path) -> None:
    (tmp_path / "chat.yaml").write_text(CHAT)
    sf = fakes.study(
        tmp_path,
        workload={"file": "chat.yaml"},
        load={"mode": "sweep", "levels": [4, 8, 16]},
        optimizer={"name": "random"},
        budget={"max_trials": 30, "tol": 0.0, "patience": 100},
    )
    assert sf.problem.space.names[-1] == LEVEL_KNOB
    run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate)
    by_config: dict[str, set[float]] = {}
    for t in _trials(sf):
        key = str({k: v for k, v in t.params.items() if k != LEVEL_KNOB})
        by_config.setdefault(key, set()).add(t.params[LEVEL_KNOB])
        assert t.user_attrs["metrics"]["load_level"] == t.params[LEVEL_KNOB]
    assert len(by_config) == 10
    assert all(levels == {4.0, 8.0, 16.0} for levels in by_config.values())


def test_right_sizing_never_exceeds_the_budget(tmp_path: Path) -> None:
    space = {
        "knobs": {
            "tp": {"type": "choice", "values": [1, 2, 4, 8]},
            "workers": {"type": "int", "low": 1, "high": 8},
            "engine.max_num_seqs": {"type": "choice", "values": [32, 128]},
        }
    }
    sf = fakes.study(
        tmp_path,
        space=space,
        gpu_budget=8,
        objectives=[
            {"metric": "gpus", "direction": "minimize"},
            {"metric": "output_token_throughput_per_user", "direction": "maximize"},
        ],
        optimizer={"name": "grid"},  # the grid proposes every point (random resamples them)
        budget={"max_trials": 64, "tol": 0.0, "patience": 100},
    )
    run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate)
    ts = _trials(sf)
    over = [t for t in ts if t.params["tp"] * t.params["workers"] > 8]
    assert over  # the space has such points: they are refused, never simulated
    assert all("exceeds the GPU budget" in t.user_attrs["infeasible_reason"] for t in over)
    assert all(not t.user_attrs["metrics"] for t in over)
    ran = [t for t in ts if t.user_attrs["metrics"]]
    assert ran
    assert all(t.user_attrs["config"]["tp"] * t.user_attrs["config"]["workers"] <= 8 for t in ran)


def test_capacity_hint_is_the_median_of_the_most_similar() -> None:
    from search.run.capacity import capacity_hint

    measured = [
        ({"tp": 1, "router": "kv_aware", "seqs": 64}, 4.0),
        ({"tp": 1, "router": "kv_aware", "seqs": 256}, 5.0),
        ({"tp": 1, "router": "round_robin", "seqs": 32}, 2.0),
        ({"tp": 2, "router": "round_robin", "seqs": 64}, 1.0),
    ]
    assert capacity_hint({"tp": 1, "router": "kv_aware", "seqs": 128}, measured) == 4.5
    assert capacity_hint({"tp": 2, "router": "round_robin", "seqs": 64}, measured) == 1.0
    assert capacity_hint({"tp": 4}, []) is None


def test_a_sweep_reports_one_front_and_best_per_level(tmp_path: Path) -> None:
    """Load is the user's situation: one front and one best per level, then the load table."""
    from rich.console import Console
    from rich.table import Table

    from search.results.outcome import outcome_blocks
    from search.store.open import load_study

    (tmp_path / "chat.yaml").write_text(CHAT)
    sf = fakes.study(
        tmp_path,
        workload={"file": "chat.yaml"},
        load={"mode": "sweep", "levels": [4, 8, 16]},
        optimizer={"name": "random"},
        budget={"max_trials": 12, "tol": 0.0, "patience": 100},
    )
    run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate)
    study = load_study(sf.storage, sf.name)
    blocks = outcome_blocks(study)
    tables = [b for b, plain in blocks if not plain]
    lines = [b for b, plain in blocks if plain]
    assert [t.title.split(":")[0] for t in tables[:3]] == [
        f"Pareto front of t at load level {v}" for v in (4, 8, 16)
    ]
    assert all(isinstance(t, Table) for t in tables)
    best = [line for line in lines if line.startswith("best at load level")]
    assert [line.split(":")[0] for line in best] == [f"best at load level {v}" for v in (4, 8, 16)]
    assert all(LEVEL_KNOB not in line for line in best)  # the level is no knob to choose
    by_load = tables[-1]
    assert by_load.title.startswith("How the best configuration of t changes with load")
    assert by_load.row_count == 3
    console = Console(width=250, record=True)
    console.print(by_load)
    assert "c=4 " in console.export_text()  # judged at 4 clients, said so
    from search.results.pages.study import pareto_figures

    titles = [f.layout.title.text for f in pareto_figures(study)]
    assert [t.split(":")[0] for t in titles] == [f"t at load level {v}" for v in (4, 8, 16)]
