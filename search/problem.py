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

import dataclasses
import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args, get_type_hints

from dynosim.config import BACKEND_ENGINE_FIELDS, DeploymentConfig, PlannerConfig
from dynosim.errors import ConfigError, DynosimError, InfeasibleError
from dynosim.metrics import STAT_KEYS, Metrics, Stat
from search.load import LEVEL_KNOB, LOAD_METRICS
from search.space import Knob, Params, Space

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
        """The deployment fields before validation: base, then knobs, then derived fields.

        Base fields of the other mode are dropped, so a study may fix ``tp`` and tune ``mode``:
        with ``mode: disagg`` the top-level ``tp`` and ``workers``, with ``mode: agg`` the
        pools, ``max_local_prefill_tokens`` and the planner's pool limits (:data:`AGG_ONLY`,
        :data:`DISAGG_ONLY`). Knobs are set as they are (a knob of the wrong mode is refused
        when the problem is made). With a ``gpu_budget``:

        * agg mode without a ``workers`` knob or fixed field: workers = budget // tp, kept
          within a planner's ``min_workers``..``max_workers``;
        * a planner without ``max_gpus`` gets ``max_gpus = gpu_budget``, so it never grows the
          deployment past the study's budget.
        """
        out: dict[str, Any] = json.loads(json.dumps(dict(self.base)))
        mode = params.get("mode", out.get("mode", "agg"))
        for path in AGG_ONLY if mode == "disagg" else DISAGG_ONLY:
            _drop(out, path)
        for name, value in params.items():
            if name != LEVEL_KNOB:  # the load level of a sweep point is not a deployment field
                _put(out, name, value)
        _drop_other_backends(out)
        budget = self.gpu_budget
        if budget is None:
            return out
        planner = out.get("planner")
        if mode != "disagg" and "workers" not in params and "workers" not in self.base:
            tp = out.get("tp", 1)
            dp = out.get("attention_dp", 1)  # a replica has tp x attention_dp GPUs
            if _is_int(tp) and tp > 0 and _is_int(dp) and dp > 0:
                out["workers"] = _within_planner(budget // (tp * dp), planner)
        if isinstance(planner, dict) and planner.get("max_gpus") is None:
            planner["max_gpus"] = budget
        return out

    def to_config(self, params: Params) -> DeploymentConfig:
        """Merge knobs into the fixed fields and validate.

        The GPU budget bounds the deployment's :attr:`~DeploymentConfig.peak_gpus`: both pools
        of a disagg deployment, and the most a planner may grow it to.

        Raises:
            InfeasibleError: Over the GPU budget, or the config is rejected (a ``ConfigError``).
        """
        data = self.config_dict(params)
        budget = self.gpu_budget
        if budget is not None:
            tp = data.get("tp", 1)
            if data.get("mode", "agg") != "disagg" and _is_int(tp) and tp > budget:
                raise InfeasibleError(f"tp={tp} exceeds the GPU budget of {budget}")
            dp = data.get("attention_dp", 1)
            agg = data.get("mode", "agg") != "disagg"
            if agg and _is_int(tp) and _is_int(dp) and tp * dp > budget:
                raise InfeasibleError(
                    f"tp x attention_dp = {tp * dp} exceeds the GPU budget of {budget}"
                )
            if "planner" in data:  # the initial GPUs first: the budget, not planner.max_gpus
                start = _build({k: v for k, v in data.items() if k != "planner"})
                if start.gpus > budget:
                    raise InfeasibleError(over_budget(start, budget))
        config = _build(data)
        if budget is not None and config.peak_gpus > budget:
            raise InfeasibleError(over_budget(config, budget))
        return config

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


AGG_ONLY = ("tp", "workers", "ep", "moe_tp", "attention_dp")
"""Top-level fields that only ``mode: agg`` has (with ``mode: disagg`` each pool has its own)."""
DISAGG_ONLY = ("prefill", "decode", "max_local_prefill_tokens", "planner.prefill", "planner.decode")
"""Fields (and sections) that only ``mode: disagg`` has."""


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


def _drop_other_backends(out: dict[str, Any]) -> None:
    """Drop fixed engine fields of a backend other than the chosen one (top level and pools).

    A study may fix ``engine.schedule_policy: lpm`` and tune ``backend``: the field applies to
    the SGLang trials only.
    """
    backend = out.get("backend", "vllm")
    for where in (out, out.get("prefill"), out.get("decode")):
        engine = where.get("engine") if isinstance(where, dict) else None
        if not isinstance(engine, dict):
            continue
        for other, names in BACKEND_ENGINE_FIELDS.items():
            if other != backend:
                for name in names:
                    engine.pop(name, None)


def _under(name: str, paths: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in paths)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@functools.cache
def _sections(cls: type) -> dict[str, type]:
    """The fields of dataclass ``cls`` that are dataclasses themselves (``X`` or ``X | None``)."""
    out: dict[str, type] = {}
    for name, hint in get_type_hints(cls).items():
        for t in (hint, *get_args(hint)):
            if isinstance(t, type) and dataclasses.is_dataclass(t):
                out[name] = t
    return out


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def check_path(name: str) -> None:
    """Check that ``name`` is a dotted path to one plain deployment field.

    ``engine.max_num_seqs``, ``prefill.engine.max_num_batched_tokens``,
    ``planner.decode.max_workers``...: every part but the last names a section.

    Raises:
        ConfigError: Naming the knob and what is allowed where the path goes wrong.
    """
    cls: type = DeploymentConfig
    parts = name.split(".")
    for i, part in enumerate(parts):
        here = ".".join(parts[: i + 1])
        prefix = here[: len(here) - len(part)]
        if part not in _names(cls):
            allowed = ", ".join(prefix + n for n in _names(cls))
            raise ConfigError(f"knobs.{name}", name, f"one of {allowed}")
        sub = _sections(cls).get(part)
        last = i == len(parts) - 1
        if last and sub is not None:
            allowed = ", ".join(f"{here}.{n}" for n in _names(sub))
            raise ConfigError(f"knobs.{name}", name, f"a field of the {here} section: {allowed}")
        if sub is None:
            if not last:
                raise ConfigError(f"knobs.{name}", name, f"{here} (a plain field, no subfields)")
            return
        cls = sub


def nested_names(path: str) -> tuple[str, ...]:
    """Field names of the deployment section at dotted ``path``; empty for a plain field.

    ``engine``, ``prefill.engine``, ``planner.decode``...; an unknown path also gives ``()``.
    """
    cls: type = DeploymentConfig
    for part in path.split("."):
        sub = _sections(cls).get(part)
        if sub is None:
            return ()
        cls = sub
    return _names(cls)


def over_budget(config: DeploymentConfig, budget: int) -> str:
    """Why ``config`` does not fit in ``budget`` GPUs: its initial GPUs or its planner's ceiling.

    ``tp*workers=16 exceeds ...``, ``prefill 2x2 + decode 4x1 = 8 GPUs exceeds ...`` (workers x
    TP), or ``planner ceiling of 12 GPUs (up to 6x2; planner.max_gpus=16) exceeds ...``.
    """
    tail = f"exceeds the GPU budget of {budget}"
    pools = config.pools()
    if config.gpus > budget or config.planner is None:
        if config.mode != "disagg":
            return f"tp*workers={config.gpus} {tail}"
        layout = " + ".join(f"{name} {p.workers}x{p.tp}" for name, p in pools)
        return f"{layout} = {config.gpus} GPUs {tail}"
    planner = config.planner
    terms = " + ".join(
        f"{'' if name == 'agg' else name + ' '}up to {planner.limits(name).max_workers}x{p.tp}"
        for name, p in pools
    )
    cap = "" if planner.max_gpus is None else f"; planner.max_gpus={planner.max_gpus}"
    return f"planner ceiling of {config.peak_gpus} GPUs ({terms}{cap}) {tail}"


_PLANNER = PlannerConfig()


def _within_planner(workers: int, planner: object) -> int:
    """``workers`` moved within a planner's worker bounds (bad bounds are left to validation)."""
    if not isinstance(planner, Mapping):
        return workers
    low = planner.get("min_workers", _PLANNER.min_workers)
    high = planner.get("max_workers", _PLANNER.max_workers)
    if _is_int(high):
        workers = min(workers, high)
    if _is_int(low):
        workers = max(workers, low)
    return workers


def _put(out: dict[str, Any], path: str, value: object) -> None:
    """Set the dotted ``path`` of ``out`` to ``value``, making the sections on the way."""
    *heads, last = path.split(".")
    node = out
    for head in heads:
        if not isinstance(node.get(head), dict):
            node[head] = {}
        node = node[head]
    node[last] = value


def _drop(out: dict[str, Any], path: str) -> None:
    """Remove the dotted ``path`` from ``out`` if it is there."""
    *heads, last = path.split(".")
    node: object = out
    for head in heads:
        node = node.get(head) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _build(data: Mapping[str, Any]) -> DeploymentConfig:
    from dynosim.perf.overhead import with_calibration  # the profile's host cost, if any

    try:
        return with_calibration(DeploymentConfig.from_dict(data))
    except DynosimError as exc:
        raise InfeasibleError(f"invalid config: {exc}") from exc


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
