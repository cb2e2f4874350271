"""Early stop of a simulation whose SLO can no longer be met.

A :class:`SLOMonitor` holds per-request SLO rules ("TTFT p90 <= 2000 ms", "at least 90% of the
requests meet the deployment's SLOs"). During a run, :class:`MonitorState` counts the requests
that *certainly* violate each rule and stops the run as soon as so many do that the final
statistic must break its bound, whatever the remaining requests do. The verdict is therefore
exact: a stopped run would have failed its rule had it run to the end, and a run that is not
stopped ends exactly as it would without a monitor (the monitor only reads state).

A request certainly violates a TTFT (or end-to-end latency) bound once it completes above it or,
still without its first token (or unfinished), is older than the bound; an ITL bound once it
completes above it. Pending requests are scanned in arrival order every ``check_interval_s``
(one pointer per age rule, so each request is looked at once); completions are counted as they
happen. How many violators a rule allows follows the metric's definition in
``dynosim.metrics``: ``numpy.percentile``'s linear interpolation over the measured requests (the
first ``warmup_requests`` to complete are not measured), and attainment = requests meeting every
SLO / (measured completed + rejected). Rejections only shrink the measured population, so the
count allowed is taken at the largest population still possible (conservative). Mean (``avg``)
bounds use completed requests only (a pending request contributes its lower bound 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL

from dynosim.config import SLOConfig
from dynosim.errors import ConfigError
from dynosim.timer import at

LatencyMetric = Literal["time_to_first_token", "inter_token_latency", "request_latency"]
_PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "max": 1.0}
STOP_STATS = (*_PERCENTILES, "avg")
"""Statistics a :class:`LatencyBound` can bound."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyBound:
    """``metric.stat <= bound_ms`` over the measured requests (``stat``: avg, max, p50/p90/p99)."""

    metric: LatencyMetric
    stat: str
    bound_ms: float

    def __post_init__(self) -> None:
        if self.metric not in get_args(LatencyMetric):
            raise ConfigError("stop.metric", self.metric, " | ".join(get_args(LatencyMetric)))
        if self.stat not in STOP_STATS:
            raise ConfigError("stop.stat", self.stat, " | ".join(STOP_STATS))
        if not (isinstance(self.bound_ms, int | float) and math.isfinite(self.bound_ms)):
            raise ConfigError("stop.bound_ms", self.bound_ms, "a finite number")

    def __str__(self) -> str:
        return f"{self.metric}.{self.stat} <= {self.bound_ms:g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SLOMonitor:
    """The rules a run is stopped on.

    Attributes:
        bounds: Latency statistics that must stay within bounds.
        min_attainment: Least fraction of requests meeting every SLO of the deployment's
            ``slo`` (``None`` = no such rule).
        check_interval_s: How often pending requests are scanned (default: a quarter of the
            smallest age bound, at least 10 ms).
    """

    bounds: tuple[LatencyBound, ...] = ()
    min_attainment: float | None = None
    check_interval_s: float | None = None

    def __post_init__(self) -> None:
        a = self.min_attainment
        if a is not None and not (isinstance(a, int | float) and 0.0 <= a <= 1.0):
            raise ConfigError("stop.min_attainment", a, "a number in [0, 1]")
        c = self.check_interval_s
        if c is not None and not (isinstance(c, int | float) and 0 < c < math.inf):
            raise ConfigError("stop.check_interval_s", c, "a positive number of seconds")

    @property
    def empty(self) -> bool:
        """True when there is nothing to watch."""
        return not self.bounds and self.min_attainment is None


@dataclass(slots=True)
class _Rule:
    """One stop rule at run time: which requests are bad, how many are allowed."""

    label: str
    ttft_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None
    multi_only: bool  # the ITL population: requests with more than one output token
    allowed: Callable[[int], int]  # population size -> most bad requests that still pass
    mean: LatencyBound | None = None  # a mean rule: the bound on the metric's average
    counts_rejected: bool = False  # attainment: a rejected request is a bad one
    flagged: np.ndarray | None = None
    bad_done: int = 0  # flagged, completed, measured
    bad_pending: int = 0  # flagged, not completed yet
    total_ms: float = 0.0  # mean rules: sum over completed measured requests


def _percentile_allowed(q: float) -> Callable[[int], int]:
    def allowed(n: int) -> int:
        if n <= 0:
            return 0
        # numpy's linear percentile exceeds the bound once the value at index floor(q (n-1))
        # of the sorted values does, i.e. once n - floor(q (n-1)) values do. The small shift
        # keeps the floor from rounding up on a float error (rounding down is conservative).
        return n - math.floor(q * (n - 1) - 1e-9) - 1

    return allowed


def _attainment_allowed(fraction: float) -> Callable[[int], int]:
    def allowed(n: int) -> int:
        return max(0, math.floor(n * (1.0 - fraction) * (1 + 1e-12) + 1e-9))

    return allowed


def _latency_ms(metric: str, arrival: int, first: int, finish: int, osl: int) -> float:
    """One completed request's value of ``metric`` in ms (as ``dynosim.metrics`` computes it)."""
    if metric == "time_to_first_token":
        return (first - arrival) / 1e3
    if metric == "request_latency":
        return (finish - arrival) / 1e3
    return (finish - first) / 1e3 / (osl - 1) if osl > 1 else 0.0


class MonitorState:
    """The monitor at run time: fed by the simulation, stops it by raising ``StopSimulation``.

    Call order: ``start`` once before the run; ``on_arrival`` for every request that arrives
    (in time order), ``on_reject`` for a rejected one, ``on_finish`` for every completion.
    """

    def __init__(
        self,
        monitor: SLOMonitor,
        env: simpy.Environment,
        *,
        slo: SLOConfig,
        arrival_us: np.ndarray,
        first_token_us: Callable[[int], int],
        output_tokens: Sequence[int],
        warmup_requests: int,
    ) -> None:
        self.env = env
        self.arrival_us = arrival_us
        self.first_token_us = first_token_us
        self.osl = np.asarray(output_tokens, dtype=np.int64)
        n = len(self.osl)
        self.n = n
        self.n_multi = int((self.osl > 1).sum())
        self.warmup = warmup_requests
        self.rules = self._rules(monitor, slo)
        for rule in self.rules:
            rule.flagged = np.zeros(n, dtype=bool)
        self.completed = 0
        self.rejected = 0
        self.rejected_multi = 0
        self.arrived: list[int] = []
        ages = [b for r in self.rules for b in (r.ttft_ms, r.e2e_ms) if b is not None]
        interval = monitor.check_interval_s
        if interval is None:
            interval = max(0.01, min(ages) / 4e3) if ages else 1.0
        self.interval_us = max(1, round(interval * 1e6))
        # One scan pointer per (rule, age bound): ages are checked in arrival order.
        self.scans: list[tuple[_Rule, str, float]] = []
        for r in self.rules:
            if r.ttft_ms is not None:
                self.scans.append((r, "ttft", r.ttft_ms))
            if r.e2e_ms is not None:
                self.scans.append((r, "e2e", r.e2e_ms))
        self.pointers = [0] * len(self.scans)
        self.finished = np.zeros(n, dtype=bool)
        self.reason: str | None = None
        self._version = 0

    @staticmethod
    def _rules(monitor: SLOMonitor, slo: SLOConfig) -> list[_Rule]:
        rules: list[_Rule] = []
        for b in monitor.bounds:
            ms = float(b.bound_ms)
            mean = b.stat == "avg"
            rules.append(
                _Rule(
                    label=str(b),
                    ttft_ms=ms if b.metric == "time_to_first_token" and not mean else None,
                    itl_ms=ms if b.metric == "inter_token_latency" and not mean else None,
                    e2e_ms=ms if b.metric == "request_latency" and not mean else None,
                    multi_only=b.metric == "inter_token_latency",
                    allowed=_percentile_allowed(_PERCENTILES.get(b.stat, 1.0)),
                    mean=b if mean else None,
                )
            )
        if monitor.min_attainment is not None:
            rules.append(
                _Rule(
                    label=f"slo_attainment >= {monitor.min_attainment:g}",
                    ttft_ms=slo.ttft_ms,
                    itl_ms=slo.itl_ms,
                    e2e_ms=slo.e2e_ms,
                    multi_only=False,
                    allowed=_attainment_allowed(float(monitor.min_attainment)),
                    counts_rejected=True,
                )
            )
        return rules

    # ------------------------------------------------------------------------ feeding
    def start(self) -> None:
        """Schedule the first scan."""
        if self.scans:
            self._schedule(int(self.env.now) + self.interval_us)

    def on_arrival(self, rid: int) -> None:
        """A request arrived and was routed (its ``arrival_us`` is set)."""
        self.arrived.append(rid)

    def on_reject(self, rid: int) -> None:
        """A request was rejected at arrival (instead of ``on_arrival``): it is not measured."""
        self.rejected += 1
        if self.osl[rid] > 1:
            self.rejected_multi += 1
        for rule in self.rules:
            if rule.counts_rejected:
                rule.bad_done += 1
        self._check()

    def on_finish(self, rid: int, now: int) -> None:
        """A request completed at ``now``; may stop the run."""
        self.finished[rid] = True
        warm = self.completed < self.warmup
        self.completed += 1
        arrival = int(self.arrival_us[rid])
        first = self.first_token_us(rid)
        osl = int(self.osl[rid])
        for rule in self.rules:
            assert rule.flagged is not None
            if rule.mean is not None:
                if not warm:
                    rule.total_ms += _latency_ms(rule.mean.metric, arrival, first, now, osl)
                continue
            if rule.flagged[rid]:
                rule.bad_pending -= 1
                if not warm:
                    rule.bad_done += 1
                continue
            if warm or (rule.multi_only and osl <= 1):
                continue
            if self._bad_at_finish(rule, arrival, first, now, osl):
                rule.flagged[rid] = True
                rule.bad_done += 1
        self._check()

    # ----------------------------------------------------------------------- verdicts
    @staticmethod
    def _bad_at_finish(rule: _Rule, arrival: int, first: int, finish: int, osl: int) -> bool:
        if rule.ttft_ms is not None and (first - arrival) / 1e3 > rule.ttft_ms:
            return True
        if rule.e2e_ms is not None and (finish - arrival) / 1e3 > rule.e2e_ms:
            return True
        if rule.itl_ms is not None and osl > 1:
            return (finish - first) / 1e3 / (osl - 1) > rule.itl_ms
        return False

    def _population(self, rule: _Rule) -> int:
        if rule.counts_rejected:
            return self.n - self.warmup
        if rule.multi_only:
            return self.n_multi - self.rejected_multi
        return self.n - self.rejected - self.warmup

    def _violated(self, rule: _Rule) -> bool:
        n = self._population(rule)
        if rule.mean is not None:
            return n > 0 and rule.total_ms / n > rule.mean.bound_ms
        # Flagged requests still pending may yet be among the first completions (warm-up).
        maybe_warm = min(rule.bad_pending, max(0, self.warmup - self.completed))
        certain = rule.bad_done + rule.bad_pending - maybe_warm
        return certain > rule.allowed(n)

    def _check(self) -> None:
        for rule in self.rules:
            if self._violated(rule):
                self.reason = f"SLO cannot be met: {rule.label}"
                raise StopSimulation(self.reason)

    # -------------------------------------------------------------------------- scans
    def _schedule(self, at_us: int) -> None:
        self._version += 1
        at(self.env, at_us, NORMAL, self._on_scan, self._version)

    def _on_scan(self, version: int) -> None:
        if version != self._version:
            return
        now = int(self.env.now)
        arrived = self.arrived
        for i, (rule, kind, bound_ms) in enumerate(self.scans):
            assert rule.flagged is not None
            flagged = rule.flagged
            p = self.pointers[i]
            limit = now - bound_ms * 1e3
            while p < len(arrived) and self.arrival_us[arrived[p]] < limit:
                rid = arrived[p]
                p += 1
                if flagged[rid] or self.finished[rid]:
                    continue  # a completed request was judged when it finished
                if kind == "ttft" and self.first_token_us(rid) >= 0:
                    first = self.first_token_us(rid)
                    if (first - int(self.arrival_us[rid])) / 1e3 <= bound_ms:
                        continue
                if (now - int(self.arrival_us[rid])) / 1e3 <= bound_ms:
                    p -= 1  # float edge: not older than the bound yet
                    break
                flagged[rid] = True
                rule.bad_pending += 1
            self.pointers[i] = p
        self._check()
        if self.env.peek() < math.inf:  # something else is still going to happen
            self._schedule(now + self.interval_us)
