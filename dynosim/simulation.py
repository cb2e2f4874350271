"""Wiring: workload -> router -> engine workers -> per-request records -> metrics.

``Simulation`` owns the simpy environment, the random generator and the request bookkeeping;
it is the only module that connects the parts. ``simulate()`` is the one call the optimizer
uses.

Arrivals are kept in one heap ordered by (time, request id) and dispatched by a single
version-cancelled simpy event, so requests sent at the same instant are routed in id order
whatever order the events that released them ran in. A request that follows another
(``after_id``: a session's next turn, a closed-loop client's next request) is released when
that one completes (or is rejected), after its ``delay_s``, and not before its ``arrival_s``.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import simpy
from simpy.events import NORMAL

from dynosim.config import DeploymentConfig
from dynosim.engine.kv_cache import PrefixKVCache
from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.errors import ConfigError
from dynosim.metrics import Metrics, RequestRecords, summarize
from dynosim.router import Router, make_router
from dynosim.slo_monitor import MonitorState, SLOMonitor
from dynosim.timer import schedule_timer
from dynosim.types import Request
from dynosim.workload.limits import MAX_TIME_S

if TYPE_CHECKING:
    from dynosim.perf.deployment import DeploymentPerf

_NEVER = 1 << 62


@dataclass(frozen=True, slots=True)
class SimResult:
    """Everything a simulation produced."""

    records: RequestRecords
    metrics: Metrics
    rejections: dict[int, str]
    steps: int
    events: int


class Simulation:
    """One run of one deployment on one workload."""

    def __init__(
        self,
        config: DeploymentConfig,
        requests: Sequence[Request],
        *,
        seed: int = 0,
        fast_forward: bool = True,
        perf: DeploymentPerf | None = None,
        speedup: float = 1.0,
    ) -> None:
        for i, r in enumerate(requests):
            if r.id != i:
                raise ConfigError(
                    "requests", f"request at position {i} has id {r.id}", "ids 0..n-1"
                )
            if r.after_id is not None and not 0 <= r.after_id < i:
                raise ConfigError(f"requests[{i}].after_id", r.after_id, f"an id in [0, {i})")
        if not (isinstance(speedup, int | float) and 0 < speedup < math.inf):
            raise ConfigError("speedup", speedup, "a finite number > 0")
        self.config = config
        self.requests = requests
        self.speedup = float(speedup)
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(seed)
        if perf is None:
            from dynosim.perf.deployment import resolve

            perf = resolve(config)
        self.perf = perf
        kv_blocks = perf.kv_blocks
        engine = config.engine
        self.workers = [
            EngineWorker(
                i,
                self.env,
                engine=engine,
                kv=PrefixKVCache(kv_blocks, engine.block_size),
                timing=perf.timing,
                on_finish=self._on_finish,
                fast_forward=fast_forward,
            )
            for i in range(config.workers)
        ]
        self.router: Router = make_router(config, self.rng)
        n = len(requests)
        self._arrival_us = np.full(n, -1, dtype=np.int64)
        self._state: list[RunningRequest | None] = [None] * n
        self._finish_us = np.full(n, -1, dtype=np.int64)
        self._worker = np.full(n, -1, dtype=np.int64)
        self.rejections: dict[int, str] = {}
        self._followers: dict[int, list[int]] = {}
        self._heap: list[tuple[int, int]] = []
        for r in requests:
            if r.after_id is None:
                self._heap.append((_us(r.arrival_s / self.speedup), r.id))
            else:
                self._followers.setdefault(r.after_id, []).append(r.id)
        heapq.heapify(self._heap)
        self._dispatch_at = _NEVER
        self._dispatch_version = 0
        self._max_kv_tokens = kv_blocks * engine.block_size
        self._max_prompt = None if engine.enable_chunked_prefill else engine.max_num_batched_tokens
        self._monitor: MonitorState | None = None

    # ------------------------------------------------------------------ arrivals
    def _push(self, at_us: int, rid: int) -> None:
        heapq.heappush(self._heap, (at_us, rid))
        if at_us < self._dispatch_at:
            self._schedule_dispatch(at_us)

    def _schedule_dispatch(self, at_us: int) -> None:
        self._dispatch_at = at_us
        self._dispatch_version += 1
        schedule_timer(self.env, at_us, self._dispatch_version, self._on_dispatch, NORMAL)

    def _on_dispatch(self, ev: simpy.Event) -> None:
        if ev._value != self._dispatch_version:
            return
        now = int(self.env.now)
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, rid = heapq.heappop(heap)
            self._arrive(rid, now)
        if heap:
            self._schedule_dispatch(heap[0][0])
        else:
            self._dispatch_at = _NEVER

    def _arrive(self, rid: int, now: int) -> None:
        r = self.requests[rid]
        self._arrival_us[rid] = now
        reason = self._never_fits(r)
        if reason is not None:
            self.rejections[rid] = reason
            if self._monitor is not None:
                self._monitor.on_reject(rid)
            self._release_followers(rid, now)
            return
        rr = RunningRequest(r, prefix_caching=self.config.engine.enable_prefix_caching)
        self._state[rid] = rr
        w = self.router.route(rr, self.workers, now)
        self._worker[rid] = w
        if self._monitor is not None:
            self._monitor.on_arrival(rid)
        self.workers[w].enqueue(rr, now)

    def _never_fits(self, r: Request) -> str | None:
        kv_tokens = r.input_tokens + r.output_tokens - 1
        if kv_tokens > self._max_kv_tokens:
            return f"needs {kv_tokens} KV tokens; a worker holds {self._max_kv_tokens}"
        if self._max_prompt is not None and r.input_tokens > self._max_prompt:
            return (
                f"prompt of {r.input_tokens} tokens exceeds max_num_batched_tokens "
                f"{self._max_prompt} with chunked prefill off"
            )
        return None

    def _on_finish(self, rr: RunningRequest, now: int) -> None:
        rid = rr.req.id
        self._finish_us[rid] = now
        self._release_followers(rid, now)
        if self._monitor is not None:
            self._monitor.on_finish(rid, now)

    def _release_followers(self, rid: int, now: int) -> None:
        for fid in self._followers.pop(rid, ()):
            f = self.requests[fid]
            k = self.speedup
            self._push(max(now + _us(f.delay_s / k), _us(f.arrival_s / k)), fid)

    # ---------------------------------------------------------------------- run
    def run(self, *, warmup_requests: int = 0, stop: SLOMonitor | None = None) -> SimResult:
        """Simulate until every request has completed or been rejected.

        Args:
            warmup_requests: The first this many requests to complete are not measured.
            stop: End the run as soon as one of its SLO rules can no longer be met; the
                result then says so in ``metrics.early_stop`` and counts only what happened.
        """
        start = time.perf_counter()
        if stop is not None and not stop.empty:
            self._monitor = MonitorState(
                stop,
                self.env,
                slo=self.config.slo,
                arrival_us=self._arrival_us,
                first_token_us=self._first_token_us,
                output_tokens=[r.output_tokens for r in self.requests],
                warmup_requests=warmup_requests,
            )
            self._monitor.start()
        if self._heap:
            self._schedule_dispatch(self._heap[0][0])
        self.env.run()
        wall = time.perf_counter() - start
        records = self._records()
        early = self._monitor.reason if self._monitor is not None else None
        if early is None:
            rejected = _mask(len(self.requests), self.rejections)
            lost = np.flatnonzero((records.finish_us < 0) & ~rejected)
            if lost.size:
                raise RuntimeError(
                    f"{lost.size} requests neither finished nor rejected: {lost[:5]}"
                )
        metrics = summarize(
            records,
            slo=self.config.slo,
            gpus=self.config.gpus,
            gpu_hour_usd=self.perf.gpu_hour_usd,
            warmup_requests=warmup_requests,
            wall_s=wall,
            utilization=self._utilization(),
            early_stop=early,
            rejected_requests=len(self.rejections),
        )
        return SimResult(
            records=records,
            metrics=metrics,
            rejections=dict(self.rejections),
            steps=sum(w.steps for w in self.workers),
            events=sum(w.events for w in self.workers),
        )

    def _utilization(self) -> float:
        """Busy time of the workers over their provisioned time (0 for an empty run)."""
        end_us = int(max(self._finish_us.max(initial=0), self._arrival_us.max(initial=0)))
        if end_us <= 0:
            return 0.0
        return sum(w.busy_us for w in self.workers) / (len(self.workers) * end_us)

    def _first_token_us(self, rid: int) -> int:
        rr = self._state[rid]
        return rr.first_token_us if rr is not None else -1

    def _records(self) -> RequestRecords:
        n = len(self.requests)
        first = np.full(n, -1, dtype=np.int64)
        cached = np.zeros(n, dtype=np.int64)
        preempt = np.zeros(n, dtype=np.int64)
        for rid, rr in enumerate(self._state):
            if rr is not None:
                first[rid] = rr.first_token_us
                cached[rid] = rr.cached_tokens
                preempt[rid] = rr.preemptions
        return RequestRecords(
            arrival_us=self._arrival_us.copy(),
            first_token_us=first,
            finish_us=self._finish_us.copy(),
            input_tokens=np.fromiter((r.input_tokens for r in self.requests), np.int64, n),
            output_tokens=np.fromiter((r.output_tokens for r in self.requests), np.int64, n),
            cached_tokens=cached,
            worker=self._worker.copy(),
            preemptions=preempt,
        )


def _us(seconds: float) -> int:
    if not -MAX_TIME_S < seconds < MAX_TIME_S:  # NaN fails too
        raise ConfigError(
            "request time", seconds, f"a finite number of seconds below {MAX_TIME_S:g} (check"
            " the workload's times and speed-up)"
        )  # fmt: skip
    return round(seconds * 1e6)


def _mask(n: int, ids: dict[int, str]) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    m[list(ids)] = True
    return m


def simulate(
    config: DeploymentConfig,
    requests: Sequence[Request],
    *,
    seed: int = 0,
    warmup_requests: int = 0,
    fast_forward: bool = True,
    stop: SLOMonitor | None = None,
    speedup: float = 1.0,
) -> Metrics:
    """Simulate ``config`` serving ``requests``; the optimizer's only view of the simulator.

    With ``stop``, the run ends as soon as its SLO rules can no longer be met
    (``Metrics.early_stop`` says which, ``Metrics.simulated_requests`` how far it got).
    ``speedup`` replays the workload that many times faster (arrival times and think times
    divided by it), exactly as ``dynosim.workload.speedup`` would, without copying it.

    Raises:
        ConfigError: a field is invalid for this model/GPU (e.g. TP does not divide the heads).
        InfeasibleError: the deployment cannot run (e.g. the model does not fit in memory).
    """
    sim = Simulation(config, requests, seed=seed, fast_forward=fast_forward, speedup=speedup)
    return sim.run(warmup_requests=warmup_requests, stop=stop).metrics
