"""RayEvaluator on a 2-CPU local runtime, with the fake simulator (fast)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from search.run.driver import run_study
from search.store.open import open_storage
from tests.unit.search import fakes

pytestmark = pytest.mark.ray


def test_study_on_ray_survives_a_worker_death(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "died"
    monkeypatch.setenv("FAKE_SIM_DIE_MARKER", str(marker))  # the first task kills its worker
    sf = fakes.study(
        tmp_path,
        optimizer={"name": "optuna-nsga2", "population": 6},
        executor={"kind": "ray", "num_cpus": 2},
        budget={"max_trials": 12, "tol": 0.0, "patience": 100},
    )
    state = run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate)
    assert marker.exists()
    assert state.n_trials == 12
    ts = optuna.load_study(study_name="t", storage=open_storage(sf.storage)).trials
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in ts)
    assert not any("lost" in (t.user_attrs["infeasible_reason"] or "") for t in ts)
    import ray

    assert not ray.is_initialized()  # the evaluator shut down the runtime it started
