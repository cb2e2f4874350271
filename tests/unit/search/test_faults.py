"""Faults injected through the evaluator: a raise, a hang, a runaway allocation.

Each study runs a 4-point grid (``tp`` in {1, 2} x two ``max_num_seqs``) with a simulator
that misbehaves on ``tp == 2`` (``faulty.py``): the two faulty trials must be recorded with the
reason and the two others must complete normally, on the local executor and on Ray.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest

from dynosim.errors import ConfigError
from dynosim.types import Request
from search.run.driver import EvaluatorFactory, run_study
from search.run.evaluate import EvalContext
from search.run.evaluators import Evaluator, LocalEvaluator
from search.store.open import open_storage
from search.study.study_file import StudyFile
from tests.unit.search import fakes, faulty

SPACE: dict[str, Any] = {
    "knobs": {
        "tp": {"type": "choice", "values": [1, faulty.FAULTY_TP]},
        "engine.max_num_seqs": {"type": "choice", "values": [16, 64]},
    }
}
LOCAL_TIMEOUT_S = 1.5
RAY_TIMEOUT_S = 6.0  # counted from submission: covers a fresh worker's start on a busy machine

# fault -> (simulator, budget fields, executor fields)
FAULTS: dict[str, tuple[Callable[..., Any], dict[str, Any], dict[str, Any]]] = {
    "raise": (faulty.raising, {}, {}),
    "hang": (faulty.hanging, {"trial_timeout_s": LOCAL_TIMEOUT_S}, {}),
    "allocate": (faulty.allocating, {}, {"memory_limit_mb": 512}),
}
REASONS = {  # how each fault's trials are recorded (the start of the reason)
    "raise": "simulator error RuntimeError: injected simulator bug (",
    "hang": f"exceeded the trial time limit of {LOCAL_TIMEOUT_S:g} s",
    "allocate": "exceeded the memory limit of 512 MiB (simulator error MemoryError",
}


def bounded(sf: StudyFile) -> EvaluatorFactory:
    """The study file's evaluator with its limits (what ``driver.default_evaluator`` passes)."""
    ex = sf.executor
    limits = {
        "trial_timeout_s": sf.budget.trial_timeout_s,
        "memory_limit_mb": ex.memory_limit_mb,
    }

    def make(ctx: EvalContext, requests: Sequence[Request]) -> Evaluator:
        if ex.kind == "local":
            return LocalEvaluator(ctx, requests, **limits)
        from search.run.ray_evaluator import RayEvaluator

        return RayEvaluator(
            ctx, requests, address=ex.address, num_cpus=ex.num_cpus,
            max_retries=ex.max_retries, **limits,
        )  # fmt: skip

    return make


def run_faulty(tmp_path: Path, fault: str, kind: str, **budget: Any) -> list[Any]:
    simulate, budget_fields, executor_fields = FAULTS[fault]
    sf = fakes.study(
        tmp_path,
        space=SPACE,
        optimizer={"name": "grid"},
        budget={"max_trials": 4, "tol": 0.0, "patience": 100, **budget_fields, **budget},
        executor={"kind": kind, **executor_fields},
        constraints=[],
    )
    state = run_study(sf, fakes.tiny_requests(), simulate_fn=simulate, evaluator=bounded(sf))
    assert state.n_trials == 4
    return optuna.load_study(study_name="t", storage=open_storage(sf.storage)).trials


def check(trials: list[Any], expected: str) -> None:
    """The faulty trials say why; the others ran; every trial is recorded once."""
    assert len(trials) == 4
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert len({(t.params["tp"], t.params["engine.max_num_seqs"]) for t in trials}) == 4
    for t in trials:
        reason = t.user_attrs["infeasible_reason"]
        if t.params["tp"] == faulty.FAULTY_TP:
            assert str(reason).startswith(expected), reason
            assert not t.user_attrs["metrics"]
        else:
            assert reason is None
            assert t.user_attrs["metrics"]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_local_executor_records_the_fault_and_goes_on(tmp_path: Path, fault: str) -> None:
    children = _children()
    trials = run_faulty(tmp_path, fault, "local")
    check(trials, REASONS[fault])
    assert _children() == children  # every evaluation process is gone (a hang was killed)
    walls = [t.user_attrs["wall_s"] for t in trials if t.params["tp"] == faulty.FAULTY_TP]
    assert max(walls) < LOCAL_TIMEOUT_S + 2.0


def test_limits_are_validated(tmp_path: Path) -> None:
    for bad in (0, -1, float("nan"), float("inf"), True, "1h"):
        with pytest.raises(ConfigError, match=r"budget\.trial_timeout_s"):
            fakes.study(tmp_path, budget={"trial_timeout_s": bad})
    for bad in (0, -5, 1.5, "1G", True):
        with pytest.raises(ConfigError, match=r"executor\.memory_limit_mb"):
            fakes.study(tmp_path, executor={"kind": "local", "memory_limit_mb": bad})
    sf = fakes.study(tmp_path)
    assert sf.budget.trial_timeout_s == 3600.0
    assert sf.executor.memory_limit_mb is None


# -- on Ray: one 2-CPU runtime for the module (the evaluators join it, not own it) -----------


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    import logging

    import ray

    root = str(Path(__file__).resolve().parents[3])
    pythonpath = os.pathsep.join(
        [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
        runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
    )  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.ray
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_ray_records_the_fault_and_goes_on(tmp_path: Path, fault: str, ray_runtime: None) -> None:
    budget = {"trial_timeout_s": RAY_TIMEOUT_S} if fault == "hang" else {}
    expected = f"exceeded the trial time limit of {RAY_TIMEOUT_S:g} s"
    check(run_faulty(tmp_path, fault, "ray", **budget), expected if budget else REASONS[fault])


def _children() -> set[int]:
    """Live child processes of this process (Linux ``/proc``)."""
    me, out = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(entry.name))
    return out
