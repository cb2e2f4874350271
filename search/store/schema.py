"""How a trial is laid out in Optuna: the only code that knows the stored keys.

Layout of a study written by :class:`~search.store.record.StudyRecord`:

* a trial's ``params`` with distributions from the space (:func:`distributions`); ``values`` in
  study directions;
* a config that cannot run is COMPLETE with penalty values and every constraint violated
  (``search.study.objectives``); only evaluations lost to a crash are FAIL (and re-queued on
  resume), with ``system_attrs["fail_reason"]``;
* ``system_attrs["constraints"]``: list of floats, ``<= 0`` satisfied;
* ``user_attrs``: ``metrics``, ``config``, ``config_hash``, ``seed``, ``infeasible_reason``,
  ``feasible``, ``wall_s`` (:func:`encode` writes them, :func:`decode` reads them back);
* the study's user attributes: ``study`` (the stored study file), ``objectives``,
  ``constraints`` (the built-in ``runnable`` first), ``hv_history``, ``hv_reference``,
  ``status``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from search.study.objectives import Constraint
from search.study.space import Knob, Params, Space
from search.trial import TrialResult

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

METRICS = "metrics"
CONFIG = "config"
CONFIG_HASH = "config_hash"
SEED = "seed"
REASON = "infeasible_reason"
FEASIBLE = "feasible"
WALL_S = "wall_s"
KEYS = (METRICS, CONFIG, CONFIG_HASH, SEED, REASON, FEASIBLE, WALL_S)
"""A finished trial's user attributes, in the order they are written."""
CONSTRAINTS = "constraints"
"""System attribute of a trial: its constraint values; user attribute of a study: their meaning."""
FAIL_REASON = "fail_reason"
"""System attribute of a FAIL trial: why its evaluation was lost."""
STUDY = "study"
OBJECTIVES = "objectives"
HV_HISTORY = "hv_history"
HV_REFERENCE = "hv_reference"
STATUS = "status"


def distribution(knob: Knob) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution of a knob."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if knob.kind == "choice":
        return CategoricalDistribution(list(knob.values))
    if knob.kind == "int":
        step = int(knob.step) if knob.step is not None else 1
        return IntDistribution(int(knob.low), int(knob.high), log=knob.log, step=step)
    return FloatDistribution(knob.low, knob.high, log=knob.log, step=knob.step)


def distributions(space: Space, params: Params) -> dict[str, Any]:
    """Distributions of the knobs present in ``params``."""
    return {name: distribution(space.knob(name)) for name in params}


def encode(r: TrialResult) -> dict[str, Any]:
    """The user attributes a finished trial stores (:data:`KEYS`, in that order)."""
    return {
        METRICS: r.metrics,
        CONFIG: r.config,
        CONFIG_HASH: r.config_hash,
        SEED: r.seed,
        REASON: r.reason,
        FEASIBLE: r.feasible,
        WALL_S: r.wall_s,
    }


def decode(trial: FrozenTrial) -> TrialResult:
    """The ``TrialResult`` of a COMPLETE trial, as written by :func:`encode`."""
    u = trial.user_attrs
    return TrialResult(
        params=dict(trial.params),
        config=dict(u.get(CONFIG, {})),
        config_hash=str(u.get(CONFIG_HASH, "")),
        metrics={k: float(v) for k, v in u.get(METRICS, {}).items()},
        values=tuple(float(v) for v in trial.values or ()),
        constraints=tuple(float(c) for c in trial.system_attrs.get(CONSTRAINTS, ())),
        feasible=bool(u.get(FEASIBLE, False)),
        reason=u.get(REASON),
        seed=int(u.get(SEED, 0)),
        wall_s=float(u.get(WALL_S, 0.0)),
    )


def trial_metrics(trial: FrozenTrial) -> dict[str, Any]:
    """The metrics a trial recorded (``{}`` when it did not run)."""
    return trial.user_attrs.get(METRICS) or {}


def is_feasible(trial: FrozenTrial) -> bool:
    """COMPLETE with finite values, not marked infeasible, every constraint ``<= 0``."""
    import optuna

    if trial.state != optuna.trial.TrialState.COMPLETE or not trial.values:
        return False
    if trial.user_attrs.get(FEASIBLE) is False:
        return False
    if not all(math.isfinite(v) for v in trial.values):
        return False
    return all(float(c) <= 0 for c in trial.system_attrs.get(CONSTRAINTS, ()))


def is_runnable(trial: FrozenTrial) -> bool:
    """COMPLETE with metrics: the config ran (it may still violate an SLO)."""
    import optuna

    return (
        trial.state == optuna.trial.TrialState.COMPLETE
        and bool(trial.values)
        and bool(trial.user_attrs.get(METRICS))
    )


def study_objectives(study: optuna.Study) -> list[tuple[str, str]]:
    """``(metric, direction)`` per objective; ``objective_i`` when the study does not say."""
    dirs = [d.name.lower() for d in study.directions]
    stored = study.user_attrs.get(OBJECTIVES) or []
    if len(stored) == len(dirs):
        return [(str(o["metric"]), d) for o, d in zip(stored, dirs, strict=True)]
    return [(f"objective_{i}", d) for i, d in enumerate(dirs)]


def slo_constraints(study: optuna.Study) -> list[Constraint]:
    """The study's SLO constraints (without the built-in ``runnable`` entry)."""
    raw = study.user_attrs.get(CONSTRAINTS) or []
    return [
        Constraint(str(c["metric"]), c["op"], float(c["value"]))
        for c in raw
        if c.get("metric") != "runnable"
    ]


def constraint_names(study: optuna.Study) -> list[str]:
    """``metric<op>value`` of each stored constraint value (the ``runnable`` one first)."""
    raw = study.user_attrs.get(CONSTRAINTS) or []
    return [f"{c['metric']}{c['op']}{c['value']:g}" for c in raw]
