"""The optimization problem as data: space, objectives, SLO constraints, fixed deployment fields.

How knob values become a deployment config is in :mod:`search.study.deployment`; what a trial is
judged by in :mod:`search.study.objectives`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynosim.config import BACKEND_ENGINE_FIELDS, DeploymentConfig
from dynosim.errors import ConfigError, InfeasibleError
from search.study.deployment import AGG_ONLY, DISAGG_ONLY, build_config, check_path, config_dict
from search.study.load import LEVEL_KNOB
from search.study.objectives import (
    BIG_VIOLATION,
    RUNNABLE,
    Constraint,
    Direction,
    Objective,
    Score,
)
from search.study.space import Knob, Params, Space


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """Everything needed to turn knob values into a scored trial (picklable, for Ray).

    Attributes:
        space: The knobs.
        objectives: What to optimise, in order.
        constraints: SLOs every feasible config must meet.
        base: Fixed deployment fields (model, gpu, dtype, slo...) the knobs are merged into.
        gpu_budget: GPUs available; without a ``workers`` knob, workers = budget // tp.
    """

    space: Space
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...] = ()
    base: Mapping[str, Any] = field(default_factory=dict)
    gpu_budget: int | None = None

    def __post_init__(self) -> None:
        if not self.objectives:
            raise ConfigError("objectives", [], "at least one objective")
        metrics = [o.metric for o in self.objectives]
        for i, metric in enumerate(metrics):
            if metric in metrics[:i]:
                raise ConfigError(f"objectives[{i}].metric", metric, "distinct metrics")
        for name in self.space.names:
            if name != LEVEL_KNOB:
                check_path(name)
        self._check_modes()
        self._check_backends()

    def _check_backends(self) -> None:
        """Refuse a backend-specific engine knob that is active with another backend.

        ``engine.enable_mixed_chunk`` (SGLang) with a ``backend`` knob that can be vllm, say,
        needs ``when: {backend: sglang}``.
        """
        possible = self._possible("backend", "vllm")
        for knob in self.space.knobs:
            own = _backend_of(knob.name)
            if own is None:
                continue
            if _live(knob, "backend", possible) - {own}:
                raise ConfigError(
                    f"knobs.{knob.name}", knob.name, f"an engine field of backend {own} only "
                    f"(add when: {{backend: {own}}})"
                )  # fmt: skip

    def _possible(
        self, field: str, default: str, values: Sequence[str] | None = None
    ) -> set[object]:
        """The values of ``field`` a trial can have (only those among ``values`` if given).

        Its knob's values, or the base's; also the base's while a ``when`` leaves the knob
        inactive.
        """
        fixed = self.base.get(field, default)
        possible: set[object] = {fixed} if values is None or fixed in values else set()
        if field in self.space.names:
            knob = self.space.knob(field)
            chosen: set[object] = {v for v in knob.values if values is None or v in values}
            possible = chosen | possible if knob.when else chosen
        return possible

    def _check_modes(self) -> None:
        """Refuse a knob that is active with a ``mode`` its field does not exist in.

        A top-level ``tp``/``workers`` knob is an error with ``mode: disagg``, a pool (or other
        disagg-only) knob with ``mode: agg``; a ``when: {mode: ...}`` condition scopes one.
        """
        possible = self._possible("mode", "agg", ("agg", "disagg"))
        for knob in self.space.knobs:
            if _under(knob.name, AGG_ONLY):
                own = "agg"
            elif _under(knob.name, DISAGG_ONLY):
                own = "disagg"
            else:
                continue
            if not _live(knob, "mode", possible) - {own}:
                continue
            why = "a disagg-only field, a knob only with mode: disagg (add when: {mode: disagg})"
            if own == "agg":
                why = (
                    f"no top-level {knob.name} knob with mode: disagg (tune prefill.{knob.name} "
                    f"and decode.{knob.name}, or add when: {{mode: agg}})"
                )
            raise ConfigError(f"knobs.{knob.name}", knob.name, why)

    @property
    def directions(self) -> tuple[Direction, ...]:
        """Objective directions, as Optuna takes them."""
        return tuple(o.direction for o in self.objectives)

    def constraint_dicts(self) -> list[dict[str, Any]]:
        """Constraint descriptions aligned with every trial's constraint values."""
        return [dict(RUNNABLE), *(c.to_dict() for c in self.constraints)]

    def config_dict(self, params: Params) -> dict[str, Any]:
        """The deployment fields before validation (``deployment.config_dict``)."""
        return config_dict(self.base, self.gpu_budget, params)

    def to_config(self, params: Params) -> DeploymentConfig:
        """Merge knobs into the fixed fields and validate.

        The GPU budget bounds the deployment's :attr:`~DeploymentConfig.peak_gpus`: both pools
        of a disagg deployment, and the most a planner may grow it to.

        Raises:
            InfeasibleError: Over the GPU budget, or the config is rejected (a ``ConfigError``).
        """
        return build_config(self.base, self.gpu_budget, params)

    def buildable(self, params: Params) -> bool:
        """Whether ``params`` become a valid config within the GPU budget (no simulation)."""
        try:
            self.to_config(params)
        except InfeasibleError:
            return False
        return True

    def score(self, metrics: Mapping[str, float]) -> Score:
        """Objective values and constraint violations of a config that ran."""
        values: list[float] = []
        reason = None
        for o in self.objectives:
            v = metrics.get(o.metric, math.nan)
            if not math.isfinite(v):
                reason = reason or f"objective {o.metric} is {v}"
                v = o.worst
            values.append(float(v))
        cons = [0.0, *(c.violation(metrics) for c in self.constraints)]
        if reason is not None:
            cons[0] = BIG_VIOLATION
        else:
            broken = [str(c) for c, v in zip(self.constraints, cons[1:], strict=True) if v > 0]
            if broken:
                reason = "SLO violated: " + "; ".join(broken)
        return Score(tuple(values), tuple(cons), reason is None, reason)

    def unmet(self, score: Score, reason: str) -> Score:
        """``score`` of a config that ran but cannot count as feasible.

        It was stopped early, or no load meets its SLO: infeasible with ``reason``, the
        ``runnable`` entry at least 1.
        """
        cons = (max(score.constraints[0], 1.0), *score.constraints[1:])
        return Score(score.values, cons, False, reason)

    def penalty(self, reason: str) -> Score:
        """The record of a config that could not run."""
        values = tuple(o.worst for o in self.objectives)
        cons = tuple(BIG_VIOLATION for _ in range(1 + len(self.constraints)))
        return Score(values, cons, False, reason)


def _live(knob: Knob, field: str, possible: set[object]) -> set[object]:
    """The values of ``field`` with which ``knob`` is active (its ``when`` may scope it)."""
    scoped = dict(knob.when).get(field)
    return possible if scoped is None else possible & set(scoped)


def _backend_of(name: str) -> str | None:
    """The backend whose own engine field the knob ``name`` sets (any pool), or None."""
    head, _, last = name.rpartition(".")
    if head != "engine" and not head.endswith(".engine"):
        return None
    return next((b for b, fs in BACKEND_ENGINE_FIELDS.items() if last in fs), None)


def _under(name: str, paths: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in paths)
