"""The optimization problem as data: space, objectives, SLO constraints, fixed deployment fields.

Objectives and constraints name simulator metrics as :meth:`dynosim.metrics.Metrics.flat` does
(``time_to_first_token.p90``, ``output_token_throughput_per_gpu``...). A bare per-request
statistic (``output_token_throughput_per_user``) means its average.

Constraint values follow Optuna's convention: one float per constraint, ``<= 0`` satisfied. The
first entry is always the built-in ``runnable`` constraint (the config builds and simulates); the
SLO constraints follow as relative violations ``(metric - bound) / |bound|`` (sign flipped for
``>=``). A config that cannot run gets :data:`BIG_VIOLATION` on every entry and the objectives'
penalty (worst-case) values, so every sampler ranks it below every runnable config. A config
that ran but cannot count (its simulation was stopped early, or no load meets its SLO in a
capacity study) keeps its measured values with a ``runnable`` entry of at least 1.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from dynosim.config import DeploymentConfig, EngineConfig, KVRouterConfig, SLOConfig
from dynosim.errors import ConfigError, DynosimError, InfeasibleError
from dynosim.metrics import STAT_KEYS, Metrics, Stat
from search.load import LEVEL_KNOB, LOAD_METRICS
from search.space import Params, Space

Direction = Literal["maximize", "minimize"]
BIG_VIOLATION = 1e6
"""Constraint value recorded for every constraint of a config that cannot run."""
MIN_PENALTY = 1e9
"""Penalty for a ``minimize`` objective of an infeasible config (a maximised one gets 0)."""
RUNNABLE = {"metric": "runnable", "op": ">=", "value": 1.0}


def metric_names() -> tuple[str, ...]:
    """Every metric a trial records: ``Metrics.flat()``'s names, then the load metrics."""
    names: list[str] = []
    for f in fields(Metrics):
        if f.type in (Stat, "Stat"):
            names.extend(f"{f.name}.{k}" for k in STAT_KEYS)
        elif f.type not in (str, "str | None"):
            names.append(f.name)
    names.append("speedup")
    names.extend(LOAD_METRICS)
    return tuple(names)


def metric_name(name: object, where: str) -> str:
    """Validate a metric name; a bare statistic name becomes its ``.avg``.

    Raises:
        ConfigError: ``name`` is not a simulator metric.
    """
    known = metric_names()
    if isinstance(name, str) and f"{name}.avg" in known:
        return f"{name}.avg"
    if not isinstance(name, str) or name not in known:
        stats = sorted({n.split(".")[0] for n in known})
        raise ConfigError(where, name, "a metric: " + ", ".join(stats) + " (stats: .p90 ...)")
    return name


@dataclass(frozen=True, slots=True)
class Objective:
    """One objective: a metric and whether more or less is better."""

    metric: str
    direction: Direction
    penalty: float | None = None

    @property
    def worst(self) -> float:
        """The finite value recorded when the config cannot run or the metric is not finite."""
        if self.penalty is not None:
            return self.penalty
        return 0.0 if self.direction == "maximize" else MIN_PENALTY

    def to_dict(self) -> dict[str, Any]:
        """The storage form ``{"metric", "direction"}``."""
        return {"metric": self.metric, "direction": self.direction}


_CONSTRAINT_RE = re.compile(r"^\s*([\w.]+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True, slots=True)
class Constraint:
    """An SLO such as ``time_to_first_token.p90 <= 2000``."""

    metric: str
    op: Literal["<=", ">="]
    value: float

    def violation(self, metrics: Mapping[str, float]) -> float:
        """Relative violation; ``<= 0`` means satisfied, a NaN metric counts as violated."""
        m = metrics.get(self.metric, math.nan)
        if not math.isfinite(m):
            return BIG_VIOLATION
        scale = max(abs(self.value), 1e-9)
        d = (m - self.value) if self.op == "<=" else (self.value - m)
        return d / scale

    def to_dict(self) -> dict[str, Any]:
        """The storage form ``{"metric", "op", "value"}``."""
        return {"metric": self.metric, "op": self.op, "value": self.value}

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"

    @classmethod
    def parse(cls, raw: object, where: str) -> Constraint:
        """From ``"metric <= value"`` or ``{metric, op, value}``.

        Raises:
            ConfigError: Malformed constraint.
        """
        if isinstance(raw, str):
            m = _CONSTRAINT_RE.match(raw)
            if m is None:
                raise ConfigError(where, raw, "'METRIC <= NUMBER' or 'METRIC >= NUMBER'")
            metric, op, value = m.group(1), m.group(2), m.group(3)
        elif isinstance(raw, Mapping) and set(raw) == {"metric", "op", "value"}:
            metric, op, value = raw["metric"], raw["op"], raw["value"]
        else:
            raise ConfigError(where, raw, "'METRIC <= NUMBER' or {metric, op, value}")
        if op not in ("<=", ">="):
            raise ConfigError(f"{where}.op", op, "<= | >=")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{where}.value", value, "a finite number") from None
        if not math.isfinite(number):
            raise ConfigError(f"{where}.value", value, "a finite number")
        return cls(metric_name(metric, f"{where}.metric"), "<=" if op == "<=" else ">=", number)


@dataclass(frozen=True, slots=True)
class Score:
    """What a trial records in study directions."""

    values: tuple[float, ...]
    constraints: tuple[float, ...]
    feasible: bool
    reason: str | None


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
        top = {f.name for f in fields(DeploymentConfig)}
        for name in self.space.names:
            if name == LEVEL_KNOB:
                continue
            head, _, tail = name.partition(".")
            if head not in top:
                raise ConfigError(f"knobs.{name}", name, "a DeploymentConfig field path")
            sub = nested_names(head)
            if bool(tail) != bool(sub) or (tail and tail not in sub):
                allowed = ", ".join(f"{head}.{s}" for s in sub) if sub else head
                raise ConfigError(f"knobs.{name}", name, allowed)

    @property
    def directions(self) -> tuple[Direction, ...]:
        """Objective directions, as Optuna takes them."""
        return tuple(o.direction for o in self.objectives)

    def constraint_dicts(self) -> list[dict[str, Any]]:
        """Constraint descriptions aligned with every trial's constraint values."""
        return [dict(RUNNABLE), *(c.to_dict() for c in self.constraints)]

    def config_dict(self, params: Params) -> dict[str, Any]:
        """The deployment fields before validation: base, then knobs, then derived workers."""
        out: dict[str, Any] = json.loads(json.dumps(dict(self.base)))
        for name, value in params.items():
            if name == LEVEL_KNOB:
                continue  # the load level of a sweep point, not a deployment field
            head, _, tail = name.partition(".")
            if tail:
                out.setdefault(head, {})[tail] = value
            else:
                out[head] = value
        if self.gpu_budget is not None and "workers" not in params and "workers" not in self.base:
            tp = out.get("tp", 1)
            if isinstance(tp, int) and tp > 0:
                out["workers"] = self.gpu_budget // tp
        return out

    def to_config(self, params: Params) -> DeploymentConfig:
        """Merge knobs into the fixed fields and validate.

        Raises:
            InfeasibleError: Over the GPU budget, or the config is rejected (a ``ConfigError``).
        """
        data = self.config_dict(params)
        if self.gpu_budget is not None:
            tp, workers = data.get("tp", 1), data.get("workers", 1)
            if isinstance(tp, int) and tp > self.gpu_budget:
                raise InfeasibleError(f"tp={tp} exceeds the GPU budget of {self.gpu_budget}")
            if isinstance(tp, int) and isinstance(workers, int) and tp * workers > self.gpu_budget:
                raise InfeasibleError(
                    f"tp*workers={tp * workers} exceeds the GPU budget of {self.gpu_budget}"
                )
        try:
            return DeploymentConfig.from_dict(data)
        except DynosimError as exc:
            raise InfeasibleError(f"invalid config: {exc}") from exc

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


def nested_names(head: str) -> tuple[str, ...]:
    """Field names of a nested deployment section (``engine``, ...); empty for a plain field."""
    nested = {"kv_router": KVRouterConfig, "engine": EngineConfig, "slo": SLOConfig}
    sub = nested.get(head)
    return tuple(f.name for f in fields(sub)) if sub is not None else ()


def config_hash(
    config: Mapping[str, Any], workload_id: str, seed: int, level: object = None
) -> str:
    """sha256 of the canonical JSON of the config, the workload id, the seed, the load level.

    The level is that of a sweep point (``None``, the default, leaves it out).
    """
    key: dict[str, Any] = {"config": config, "workload": workload_id, "seed": seed}
    if level is not None:
        key["level"] = level
    blob = json.dumps(
        key,
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def params_key(params: Params) -> str:
    """A canonical string for a knob assignment (dict keys sorted)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def check_directions(stored: Sequence[str], wanted: Sequence[str]) -> None:
    """Raise when a stored study's directions differ from the study file's.

    Raises:
        ConfigError: The directions differ (Optuna's ``load_if_exists`` does not check).
    """
    if [d.lower() for d in stored] != [d.lower() for d in wanted]:
        raise ConfigError("objectives", list(wanted), f"the stored directions {list(stored)}")
