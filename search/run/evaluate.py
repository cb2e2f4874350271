"""Evaluation: knob values in, a scored :class:`~search.trial.TrialResult` out.

:func:`evaluate_one` is pure and in-process; the evaluators (:mod:`search.run.evaluators`,
:mod:`search.run.ray_evaluator`) only decide where it runs. Every failure of a config (it does
not build, does not fit, the simulator raises) becomes an infeasible result with the reason,
never an exception.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dynosim.errors import DynosimError
from search.run.capacity import (
    Probe,
    add_load_metrics,
    capacity_metrics,
    find_capacity,
    slo_monitor,
)
from search.study.load import LEVEL_KNOB, LoadAxis, LoadSpec
from search.study.problem import Problem
from search.trial import Params, TrialResult, config_hash

if TYPE_CHECKING:
    from dynosim.config import DeploymentConfig
    from dynosim.slo_monitor import SLOMonitor
    from dynosim.types import Request


SimulateFn = Callable[..., Any]
"""``simulate(config, requests, *, seed, warmup_requests) -> Metrics`` (``dynosim.simulate``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalContext:
    """What every evaluation of a study shares (small and picklable; requests travel apart).

    Attributes:
        problem: Space, objectives, constraints, fixed fields.
        workload_id: Digest of the workload (and load mode), part of every config hash.
        seed: Simulation seed.
        warmup_requests: Requests left out of the metrics.
        simulate_fn: Replaces ``dynosim.simulate`` (tests).
        load: The load mode.
        axis: How a load level becomes requests (``None``: the requests as given).
    """

    problem: Problem
    workload_id: str
    seed: int = 0
    warmup_requests: int = 0
    simulate_fn: SimulateFn | None = None
    load: LoadSpec = field(default_factory=LoadSpec)
    axis: LoadAxis | None = None

    @property
    def monitor(self) -> SLOMonitor | None:
        """The early-stop rules every simulation gets (``None`` when off)."""
        return slo_monitor(self.problem.constraints) if self.load.stops_early else None


@dataclass(frozen=True, slots=True)
class Prepared:
    """A configuration built (or not) before any simulation.

    Attributes:
        config: The validated config, or ``None`` when it does not build.
        data: ``DeploymentConfig.to_dict()``, or the unvalidated merge if it did not build.
        config_hash: sha256 of config + workload id + seed (+ level).
        reason: Why it does not build, or ``None``.
    """

    config: DeploymentConfig | None
    data: dict[str, Any]
    config_hash: str
    reason: str | None


def prepare(ctx: EvalContext, params: Params) -> Prepared:
    """Build the config and its hash before any simulation."""
    level = params.get(LEVEL_KNOB)
    try:
        config = ctx.problem.to_config(params)
    except DynosimError as exc:
        data = ctx.problem.config_dict(params)
        return Prepared(None, data, config_hash(data, ctx.workload_id, ctx.seed, level), str(exc))
    data = config.to_dict()
    return Prepared(config, data, config_hash(data, ctx.workload_id, ctx.seed, level), None)


def evaluate_one(
    ctx: EvalContext,
    params: Params,
    requests: Sequence[Request],
    *,
    hint: float | None = None,
) -> TrialResult:
    """Simulate one configuration and score it; never raises for a bad config.

    Args:
        ctx: The study's shared context (problem, seed, simulate function).
        params: Knob values.
        requests: The workload.
        hint: Capacity mode: the level a capacity search starts from.

    Returns:
        The scored result; infeasible with a reason when the config cannot run.
    """
    t0 = time.perf_counter()
    prepared = prepare(ctx, params)
    config, reason = prepared.config, prepared.reason
    problem = ctx.problem
    metrics: dict[str, float] = {}
    forced: str | None = None
    if config is not None:
        try:
            metrics, forced = measure(ctx, config, params, requests, hint)
        except DynosimError as exc:
            reason = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a simulator bug must not end a long study
            where = traceback.extract_tb(exc.__traceback__)[-1]
            at = f"{where.filename}:{where.lineno}"
            reason = f"simulator error {type(exc).__name__}: {exc} ({at})"
    score = problem.score(metrics) if metrics else problem.penalty(reason or "no metrics")
    if metrics and forced is not None:
        score = problem.unmet(score, forced)
    return TrialResult(
        params=dict(params),
        config=prepared.data,
        config_hash=prepared.config_hash,
        metrics=metrics,
        values=score.values,
        constraints=score.constraints,
        feasible=score.feasible,
        reason=score.reason,
        seed=ctx.seed,
        wall_s=time.perf_counter() - t0,
    )


def measure(
    ctx: EvalContext,
    config: DeploymentConfig,
    params: Params,
    requests: Sequence[Request],
    hint: float | None = None,
) -> tuple[dict[str, float], str | None]:
    """Simulate ``config`` as the study's load mode says (``hint``: a capacity search's start).

    Returns:
        ``(metrics, reason)``: the trial's metrics (with ``load_level`` and, in capacity
        mode, the capacity metrics) and, when the run cannot count as feasible whatever its
        metrics say (stopped early, no load meets the SLO), why.
    """
    axis = ctx.axis
    if ctx.load.mode == "capacity":
        assert axis is not None
        found = find_capacity(
            lambda level: run_probe(ctx, config, requests, level),
            axis,
            ctx.load,
            hint=float(hint) if isinstance(hint, int | float) else None,
        )
        return capacity_metrics(found, config.gpus, len(requests)), found.reason
    if ctx.load.mode == "sweep":
        assert axis is not None
        p = run_probe(ctx, config, requests, float(params[LEVEL_KNOB]))
    else:
        level = axis.base if axis is not None else 1.0
        p = run_probe(ctx, config, requests, level, as_given=True)
    early = p.reason if p.stopped else None
    return p.metrics, early


def run_probe(
    ctx: EvalContext,
    config: DeploymentConfig,
    requests: Sequence[Request],
    level: float,
    *,
    as_given: bool = False,
) -> Probe:
    """One simulation at ``level`` (``as_given``: the requests as they are), scored."""
    simulate = ctx.simulate_fn if ctx.simulate_fn is not None else _default_simulate()
    speedup = 1.0
    warmup = ctx.warmup_requests
    if not as_given and ctx.axis is not None:
        requests, speedup = ctx.axis.workload_at(level, requests)
        warmup = ctx.axis.warmup_at(level, warmup)
    kwargs: dict[str, Any] = {}
    if speedup != 1.0:
        kwargs["speedup"] = speedup
    monitor = ctx.monitor
    if monitor is not None:
        kwargs["stop"] = monitor
    result = simulate(config, requests, seed=ctx.seed, warmup_requests=warmup, **kwargs)
    metrics = {k: float(v) for k, v in result.flat().items()}
    add_load_metrics(metrics, level, config.gpus)
    early = getattr(result, "early_stop", None)
    score = ctx.problem.score(metrics)
    return Probe(
        level=level,
        metrics=metrics,
        feasible=score.feasible and early is None,
        simulated_requests=int(metrics.get("simulated_requests", len(requests))),
        reason=early or score.reason,
        stopped=early is not None,
    )


def _default_simulate() -> SimulateFn:
    from dynosim import simulate

    return simulate


def failed_result(ctx: EvalContext, params: Params, why: str, wall_s: float) -> TrialResult:
    """An evaluation that produced nothing (timed out, lost, its process died), scored as such.

    A config that does not build keeps its own reason (it is why nothing could run).
    """
    prepared = prepare(ctx, params)
    score = ctx.problem.penalty(prepared.reason or why)
    return TrialResult(
        params=dict(params),
        config=prepared.data,
        config_hash=prepared.config_hash,
        metrics={},
        values=score.values,
        constraints=score.constraints,
        feasible=False,
        reason=score.reason,
        seed=ctx.seed,
        wall_s=wall_s,
    )
