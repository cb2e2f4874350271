"""The driver with the in-process evaluator and the analytic fake simulator."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest

from dynosim.errors import ConfigError
from search.run.driver import run_study
from search.store.open import open_storage
from search.store.record import StudyRecord
from search.study.space import Params
from search.study.study_file import StudyFile
from search.trial import TrialResult
from tests.unit.search import fakes

COMPLETE = optuna.trial.TrialState.COMPLETE


def run(sf: StudyFile, **kw: Any) -> Any:
    return run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate, **kw)


def trials(sf: StudyFile) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=sf.name, storage=open_storage(sf.storage)).trials


def test_every_evaluation_is_a_stored_trial(tmp_path: Path) -> None:
    sf = fakes.study(tmp_path, optimizer={"name": "random"}, seed=3)
    state = run(sf)
    assert state.status == "budget"
    assert state.n_trials == 24
    study = optuna.load_study(study_name="t", storage=open_storage(sf.storage))
    ts = study.trials
    assert len(ts) == 24
    assert all(t.state == COMPLETE for t in ts)
    for t in ts:
        sf.problem.space.validate(t.params)
        assert len(t.values) == 2
        assert len(t.system_attrs["constraints"]) == 2
        assert set(t.user_attrs) >= {
            "metrics",
            "config",
            "config_hash",
            "seed",
            "infeasible_reason",
            "feasible",
            "wall_s",
        }
        assert t.user_attrs["config"]["workers"] * t.params["tp"] == 8
        feasible = all(c <= 0 for c in t.system_attrs["constraints"])
        assert t.user_attrs["feasible"] == feasible
        assert (t.user_attrs["infeasible_reason"] is None) == feasible
    assert len({t.user_attrs["config_hash"] for t in ts}) == 24
    attrs = study.user_attrs
    assert attrs["status"] == "budget"
    assert attrs["objectives"][1] == {
        "metric": "output_token_throughput_per_user.avg",
        "direction": "maximize",
    }
    assert attrs["constraints"][1] == {
        "metric": "time_to_first_token.p90",
        "op": "<=",
        "value": 2000.0,
    }
    assert attrs["study"]["name"] == "t"
    assert attrs["hv_reference"]["point"] == [1.1, 1.1]
    assert [h[0] for h in attrs["hv_history"]] == [10, 20, 24]
    assert attrs["hv_history"][-1][1] == pytest.approx(state.hypervolume)
    assert state.front
    assert all(r.feasible for r in state.front)


def test_infeasible_configs_are_recorded_with_reasons(tmp_path: Path) -> None:
    sf = fakes.study(tmp_path, optimizer={"name": "grid"}, budget={"max_trials": 200})
    state = run(sf)
    assert state.status == "converged"  # grid exhausted
    ts = trials(sf)
    assert len(ts) == 96
    reasons = [t.user_attrs["infeasible_reason"] for t in ts]
    no_fit = [t for t in ts if "does not fit" in (reasons[t.number] or "")]
    assert no_fit
    for t in no_fit:
        assert t.params["tp"] == 8
        assert t.user_attrs["metrics"] == {}
        assert not t.user_attrs["feasible"]
        assert t.values == [0.0, 0.0]
        assert all(c > 0 for c in t.system_attrs["constraints"])
    slo = [t for t in ts if (reasons[t.number] or "").startswith("SLO violated")]
    assert slo
    assert all(t.user_attrs["metrics"] for t in slo)


def test_unbuildable_config_is_an_infeasible_trial(tmp_path: Path) -> None:
    space = {"knobs": {"tp": {"type": "choice", "values": [1, 3, 16]}}}
    sf = fakes.study(tmp_path, space=space, optimizer={"name": "grid"})
    run(sf)
    ts = {t.params["tp"]: t for t in trials(sf)}
    assert ts[1].user_attrs["metrics"]  # it ran (and violates the TTFT SLO)
    assert "power of two" in ts[3].user_attrs["infeasible_reason"]
    assert "GPU budget" in ts[16].user_attrs["infeasible_reason"]


class Repeating:
    """Proposes the same point over and over; records what it is told."""

    def __init__(self, point: Params) -> None:
        self.point = point
        self.told: list[TrialResult] = []

    def ask(self, n: int) -> list[Params]:
        return [dict(self.point) for _ in range(n)]

    def tell(self, results: Sequence[TrialResult]) -> None:
        self.told += results


def test_identical_configs_are_evaluated_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    point = {
        "tp": 1,
        "router": "round_robin",
        "engine.max_num_seqs": 16,
        "engine.enable_prefix_caching": True,
    }
    opt = Repeating(point)
    monkeypatch.setattr("search.run.driver.build_optimizer", lambda *a: opt)
    sf = fakes.study(tmp_path, budget={"max_trials": 5, "tol": 0.0, "patience": 1000})
    state = run(sf)
    assert len(trials(sf)) == 1
    assert state.n_duplicates >= 50
    assert state.status == "converged"  # nothing new to propose
    assert len(opt.told) == state.n_duplicates + 1
    assert len({r.config_hash for r in opt.told}) == 1


def test_resume_continues_without_loss_or_duplicates(tmp_path: Path) -> None:
    sf = fakes.study(
        tmp_path,
        optimizer={"name": "pymoo-nsga2", "population": 6},
        budget={"max_trials": 12, "tol": 0.0, "patience": 100},
    )
    run(sf)
    before = trials(sf)
    more = fakes.study(
        tmp_path,
        optimizer={"name": "pymoo-nsga2", "population": 6},
        budget={"max_trials": 30, "tol": 0.0, "patience": 100},
    )
    state = run(more, resume=True)
    after = trials(sf)
    assert state.n_trials == len(after) == 30
    assert [(t.params, t.values) for t in after[:12]] == [(t.params, t.values) for t in before]
    assert len({t.user_attrs["config_hash"] for t in after}) == 30
    history = optuna.load_study(study_name="t", storage=open_storage(sf.storage)).user_attrs[
        "hv_history"
    ]
    assert [h[0] for h in history] == sorted(h[0] for h in history)


def test_running_trials_are_failed_and_requeued(tmp_path: Path) -> None:
    sf = fakes.study(tmp_path, optimizer={"name": "random"}, budget={"max_trials": 4})
    run(sf)
    record = StudyRecord(open_storage(sf.storage), "t")
    lost = {
        "tp": 2,
        "router": "kv_aware",
        "kv_router.overlap_weight": 2.0,
        "engine.max_num_seqs": 100,
        "engine.enable_prefix_caching": False,
    }
    record.start(sf.problem.space, lost, 0)  # a crash left it RUNNING
    more = fakes.study(tmp_path, optimizer={"name": "random"}, budget={"max_trials": 6})
    run(more, resume=True)
    ts = trials(sf)
    states = [t.state for t in ts]
    assert states.count(optuna.trial.TrialState.FAIL) == 1
    assert states.count(COMPLETE) == 6
    assert ts[4].state == optuna.trial.TrialState.FAIL
    assert ts[5].params == lost
    assert ts[5].state == COMPLETE


def test_existing_name_and_direction_checks(tmp_path: Path) -> None:
    sf = fakes.study(tmp_path, optimizer={"name": "random"}, budget={"max_trials": 2})
    run(sf)
    with pytest.raises(ConfigError, match="dynosim resume"):
        run(sf)
    flipped = fakes.study(
        tmp_path,
        optimizer={"name": "random"},
        objectives=[
            {"metric": "goodput", "direction": "minimize"},
            {"metric": "request_throughput", "direction": "maximize"},
        ],
    )
    with pytest.raises(ConfigError, match="stored directions"):
        run(flipped, resume=True)


def test_plateau_stops_the_study(tmp_path: Path) -> None:
    sf = fakes.study(
        tmp_path,
        optimizer={"name": "random"},
        budget={"max_trials": 500, "tol": 10.0, "patience": 2, "generation": 5},
    )
    state = run(sf)
    assert state.status == "converged"
    assert state.n_trials == 15


def test_wall_time_budget(tmp_path: Path) -> None:
    sf = fakes.study(
        tmp_path, optimizer={"name": "random"}, budget={"max_trials": 500, "max_wall_s": 1e-6}
    )
    state = run(sf)
    assert state.status == "budget"
    assert state.n_trials < 5


def test_sqlite_storage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 's.db'}"
    sf = fakes.study(tmp_path, storage=url, optimizer={"name": "tpe"}, budget={"max_trials": 4})
    state = run(sf)
    assert state.n_trials == 4
    assert len(optuna.load_study(study_name="t", storage=url).trials) == 4


def test_progress_callback(tmp_path: Path) -> None:
    seen: list[int] = []
    sf = fakes.study(tmp_path, optimizer={"name": "random"}, budget={"max_trials": 3})
    run(sf, progress=lambda s: seen.append(s.n_trials))
    assert seen == [1, 2, 3]


def test_resume_of_a_finished_study_starts_no_evaluator(tmp_path: Path) -> None:
    sf = fakes.study(tmp_path, optimizer={"name": "random"}, budget={"max_trials": 3})
    run(sf)

    def no_evaluator(*args: object) -> Any:
        raise AssertionError("no evaluator needed")

    state = run(sf, resume=True, evaluator=no_evaluator)
    assert state.status == "budget"
    assert state.n_trials == 3


def test_missing_storage_file_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="existing storage file"):
        open_storage(str(tmp_path / "none.journal"), create=False)
    assert not (tmp_path / "none.journal").exists()


def test_reading_a_sqlite_file_without_studies_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    db.write_bytes(b"")
    with pytest.raises(ConfigError, match="holds Optuna studies"):
        open_storage(f"sqlite:///{db}", create=False)
    assert db.stat().st_size == 0
    sf = fakes.study(tmp_path, storage=f"sqlite:///{tmp_path / 's.db'}")
    run(sf)
    assert open_storage(sf.storage, create=False) is not None  # a real study opens


def test_repeats_of_a_running_config_do_not_spin_the_driver(tmp_path: Path) -> None:
    # Two evaluation slots, one distinct config: every further proposal repeats the one in
    # flight. The driver must wait for its result instead of asking forever.
    from search.run.evaluators import LocalEvaluator

    class TwoSlots(LocalEvaluator):
        @property
        def capacity(self) -> int:
            return 2

    space = {"knobs": {"tp": {"type": "choice", "values": [1]}}}
    sf = fakes.study(
        tmp_path,
        space=space,
        optimizer={"name": "random"},
        budget={"max_trials": 5, "tol": 0.0, "patience": 100},
    )

    def too_slow(*_: object) -> None:
        raise TimeoutError("the driver kept asking instead of waiting")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(30)
    try:
        state = run(sf, evaluator=TwoSlots)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert state.n_trials == 1
    assert state.status == "converged"


def test_misspelt_deployment_field_is_rejected_up_front(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"deployment\.backnd: got 'vllm'; allowed: one of"):
        fakes.study(tmp_path, deployment={"backnd": "vllm"})
    with pytest.raises(ConfigError, match=r"deployment\.engine\.max_seqs"):
        fakes.study(tmp_path, deployment={"engine": {"max_seqs": 8}})
