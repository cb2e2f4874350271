"""Objectives, SLO constraints and scores: what a trial is judged by.

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

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from dynosim.errors import ConfigError
from dynosim.metrics import STAT_KEYS, Metrics, Stat
from search.study.load import LOAD_METRICS

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
