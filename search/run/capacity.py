"""Capacity search: the highest load at which a configuration meets its SLO, and its hint.

Capacity search (:func:`find_capacity`) looks for the highest level of a geometric grid
(``start x (1 + tolerance)^k``) at which every SLO constraint holds: it gallops from a first
level until a feasible level sits next to an infeasible one, then bisects on the grid. Probes
above capacity are stopped early by the simulator's :class:`~dynosim.slo_monitor.SLOMonitor` as
soon as their SLO can no longer be met; probes are cached by level, so no load is simulated
twice. Near the capacity a probe costs about a full run whichever side it falls on, so what
decides the cost is how close the first level is: the study driver passes each configuration the
capacity of the most similar configuration measured so far as a hint (one grid step per move
then), and the grid makes the answer independent of that hint for a monotone system.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynosim.slo_monitor import STOP_STATS, LatencyBound, SLOMonitor
from search.study.load import LoadAxis, LoadSpec

_EARLY_STOP_METRICS = ("time_to_first_token", "inter_token_latency", "request_latency")


# ----------------------------------------------------------------------- SLO monitor
def slo_monitor(constraints: Sequence[Any]) -> SLOMonitor | None:
    """The early-stop rules implied by a study's SLO constraints (``None`` = none apply).

    ``time_to_first_token`` / ``inter_token_latency`` / ``request_latency`` statistics
    (avg, max, p50, p90, p99) with ``<=`` and ``slo_attainment >=`` can stop a run; other
    constraints (throughputs, ...) are only checked on the finished run.
    """
    bounds: list[LatencyBound] = []
    attainment: float | None = None
    for c in constraints:
        stem, _, stat = c.metric.partition(".")
        if stem in _EARLY_STOP_METRICS and stat in STOP_STATS and c.op == "<=":
            bounds.append(LatencyBound(metric=stem, stat=stat, bound_ms=c.value))
        elif c.metric == "slo_attainment" and c.op == ">=" and 0 <= c.value <= 1:
            attainment = max(attainment or 0.0, c.value)
    if not bounds and attainment is None:
        return None
    return SLOMonitor(bounds=tuple(bounds), min_attainment=attainment)


# --------------------------------------------------------------------- capacity search
@dataclass(frozen=True, slots=True)
class Probe:
    """One simulation at one level: its metrics and whether every constraint held.

    Attributes:
        level: The load level.
        metrics: ``Metrics.flat()`` of the run (partial when it was stopped early).
        feasible: The run finished and met every constraint.
        simulated_requests: Requests the run got to (all of them unless stopped early).
        reason: Why it is infeasible.
        stopped: The simulator stopped the run early (its SLO could no longer be met).
    """

    level: float
    metrics: dict[str, float]
    feasible: bool
    simulated_requests: int
    reason: str | None = None
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a capacity search found.

    Attributes:
        level: The highest feasible level (``None``: no level tried met the SLO).
        best: The probe at that level (``None`` when there is none).
        probes: Every probe, in the order run.
        at_limit: The config met its SLO at the highest level allowed.
        reason: Why there is no capacity.
    """

    level: float | None
    best: Probe | None
    probes: tuple[Probe, ...] = field(default_factory=tuple)
    at_limit: bool = False
    reason: str | None = None

    @property
    def simulated_requests(self) -> int:
        """Requests simulated over every probe (the search's cost)."""
        return sum(p.simulated_requests for p in self.probes)


def find_capacity(
    probe: Callable[[float], Probe],
    axis: LoadAxis,
    spec: LoadSpec,
    hint: float | None = None,
) -> Capacity:
    """The highest level on the study's load grid at which ``probe`` is feasible.

    Levels lie on a geometric grid ``start x (1 + tolerance)^k`` (whole clients for
    concurrency), so a capacity is a grid level: the answer does not depend on the order of the
    probes, only their number does. Feasibility is assumed monotone in load. From the first
    level (``hint`` when given, else ``start``), the search gallops up or down — one grid step
    first when hinted, about a doubling otherwise, the step doubling each time — until a
    feasible level lies next to an infeasible one or a limit (``min``/``max``/``max_probes``)
    ends it, then bisects on grid indices.

    Args:
        probe: Simulates one level.
        axis: The workload's load axis.
        spec: The study's load settings.
        hint: A level likely near the capacity (e.g. that of a similar configuration).
    """
    start = axis.snap(spec.start if spec.start is not None else axis.base)
    ratio = 1.0 + spec.tolerance
    low_limit = spec.min if spec.min is not None else start / 64
    high_limit = spec.max if spec.max is not None else start * 64
    k_min = math.ceil(math.log(low_limit / start) / math.log(ratio) - 1e-9)
    k_max = math.floor(math.log(high_limit / start) / math.log(ratio) + 1e-9)
    probes: dict[float, Probe] = {}
    order: list[Probe] = []

    def run(k: int) -> Probe:
        level = axis.snap(start * ratio**k)
        if level not in probes:
            p = probe(level)
            probes[level] = p
            order.append(p)
        return probes[level]

    k = 0
    if hint is not None and hint > 0 and math.isfinite(hint):
        k = round(math.log(hint / start) / math.log(ratio))
    k = min(max(k, k_min), k_max)
    step = 1 if hint is not None else max(1, round(math.log(2.0) / math.log(ratio)))
    lo: int | None = None  # highest feasible index seen
    hi: int | None = None  # lowest infeasible index seen
    while len(order) < spec.max_probes:
        p = run(k)
        if p.feasible:
            lo = k if lo is None else max(lo, k)
        else:
            hi = k if hi is None else min(hi, k)
        if lo is not None and hi is not None:
            if hi - lo <= 1 or axis.snap(start * ratio**lo) >= axis.snap(start * ratio**hi):
                break
            k = (lo + hi) // 2
        elif lo is not None:  # every level so far met the SLO: go up
            if lo >= k_max:
                break
            k = min(k_max, lo + step)
            step *= 2
        else:  # every level so far broke it: go down
            assert hi is not None
            if hi <= k_min:
                break
            k = max(k_min, hi - step)
            step *= 2
    if lo is None:
        lowest = min(order, key=lambda q: q.level)
        return Capacity(None, None, tuple(order), reason=_no_load(axis, lowest))
    best = run(lo)
    at_limit = hi is None and lo >= k_max
    return Capacity(best.level, best, tuple(order), at_limit=at_limit)


def _no_load(axis: LoadAxis, lowest: Probe) -> str:
    return (
        f"no load meets the SLO (lowest tried: {lowest.level:.3g} {axis.unit()}): "
        f"{lowest.reason or 'SLO violated'}"
    )


def add_load_metrics(metrics: dict[str, float], level: float, gpus: float) -> None:
    """Add ``load_level`` and the capacity metrics *as if* ``level`` were the capacity."""
    metrics["load_level"] = float(level)
    rps = metrics.get("request_throughput", math.nan)
    metrics["capacity_rps"] = rps
    metrics["capacity_rps_per_gpu"] = rps / gpus if gpus else math.nan
    metrics["capacity_output_tokens_per_s_per_gpu"] = metrics.get(
        "output_token_throughput_per_gpu", math.nan
    )


def capacity_metrics(found: Capacity, gpus: float, n_requests: int) -> dict[str, float]:
    """A trial's metrics in capacity mode: the run at capacity plus the search's own figures.

    Without a capacity, the lowest probe's metrics with every capacity metric 0.
    """
    if found.best is not None:
        out = dict(found.best.metrics)
    else:
        lowest = min(found.probes, key=lambda p: p.level)
        out = dict(lowest.metrics)
        for k in ("capacity_rps", "capacity_rps_per_gpu", "capacity_output_tokens_per_s_per_gpu"):
            out[k] = 0.0
    out["capacity_at_limit"] = float(found.at_limit)
    out["capacity_probes"] = float(len(found.probes))
    out["capacity_simulated_requests"] = float(found.simulated_requests)
    out["capacity_full_runs"] = found.simulated_requests / n_requests if n_requests else 0.0
    return out


def capacity_hint(
    params: Mapping[str, Any], measured: Sequence[tuple[Mapping[str, Any], float]]
) -> float | None:
    """Where a capacity search should start: the capacity of the most similar configurations.

    Similar = the most knobs with equal values; the hint is the median capacity of all
    configurations that share the most. (Measured on the quickstart study: 3.5 full runs per
    configuration, against 4.1 when only the single nearest configuration, or closeness of
    numeric knob values, decides: a median over ties is less noisy than one neighbour.)

    Args:
        params: The configuration about to be measured.
        measured: ``(params, capacity level)`` of configurations measured so far.
    """
    best, levels = -1, list[float]()
    for other, level in measured:
        same = sum(other.get(k) == v for k, v in params.items())
        if same > best:
            best, levels = same, []
        if same == best:
            levels.append(level)
    if not levels:
        return None
    levels.sort()
    mid = len(levels) // 2
    return levels[mid] if len(levels) % 2 else 0.5 * (levels[mid - 1] + levels[mid])
