"""Wiring: workload -> router -> worker pools (-> KV transfer -> decode pool) -> records -> metrics.

``Simulation`` owns the simpy environment, the random generator and the requests' progress
(what it records of them is kept by :class:`dynosim.recording.Recorder`); it is the only module
that connects the parts, which :mod:`dynosim.cluster.build` builds for it. ``simulate()`` is the
one call the optimizer uses.

Aggregated serving is one pool. In disaggregated serving a request is routed to a prefill
worker (its *prefill leg* leaves once the prompt is computed), then to a decode worker picked by
the decode router at that moment; its KV cache crosses that worker's ingress link, and then the
*decode leg* joins the worker's queue (admitted only when its KV blocks fit). With
``max_local_prefill_tokens > 0`` the decode router picks a worker at arrival, and a prompt whose
uncached part there is at most that long is served by it like an aggregated request (as
Dynamo's conditional disaggregation decides on the decode worker's prefix hit); a longer one is
prefilled remotely and its KV goes to that same decode worker, where it counts as incoming from
its arrival.

Pool observations (the planner's, and the timeline's) are taken by a periodic tick that runs
after every other event of its instant (:class:`dynosim.cluster.planner.Observer`).

Arrivals are kept in one heap ordered by (time, request id) and dispatched by a single
version-cancelled simpy event, so requests sent at the same instant are routed in id order
whatever order the events that released them ran in. A request that follows another
(``after_id``: a session's next turn, a closed-loop client's next request) is released when
that one completes (or is rejected), after its ``delay_s``, and not before its ``arrival_s``.
A request sent ``after_warmup`` (a benchmark tool's measured phase) follows the warm-up phase
the same way: it is released when the run's ``warmup_requests``-th request completes or is
rejected (:mod:`dynosim.workload.release`).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import simpy
from simpy.events import NORMAL

from dynosim.cluster.build import build_observer, build_pools, speculative_plan
from dynosim.cluster.handover import Handover
from dynosim.cluster.planner import Planner
from dynosim.cluster.pool import pool_perfs
from dynosim.cluster.transfer import KVLinks
from dynosim.config import DeploymentConfig, PoolName
from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.host import StreamedRequest, build_host
from dynosim.metrics import Metrics
from dynosim.recording import Recorder, SimResult
from dynosim.timer import at, run
from dynosim.types import HASH_BLOCK_TOKENS, Request
from dynosim.workload.release import WARMUP_PHASE, arrival_heap, check_requests, to_us

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dynosim.perf.deployment import DeploymentPerf
    from dynosim.slo_monitor import MonitorState, SLOMonitor

__all__ = ["SimResult", "Simulation", "simulate"]  # SimResult lives in dynosim.recording

_NEVER = 1 << 62


class Simulation:
    """One run of one deployment on one workload.

    Args:
        perf: The performance of every pool's workers (a mapping by pool name, or one for all);
            derived from the config when omitted. Tests pass simple step-time models here.
        sample_interval_s: Observe the pools this often for the timeline (a planner samples at
            its ``metric_pulling_interval_s`` anyway); None: only when a planner does.
    """

    def __init__(
        self,
        config: DeploymentConfig,
        requests: Sequence[Request],
        *,
        seed: int = 0,
        fast_forward: bool = True,
        perf: DeploymentPerf | Mapping[PoolName, DeploymentPerf] | None = None,
        speedup: float = 1.0,
        sample_interval_s: float | None = None,
    ) -> None:
        check_requests(requests, speedup, sample_interval_s)
        self.config = config
        self.requests = requests
        self.speedup = float(speedup)
        self.env = simpy.Environment()
        self.rng = np.random.default_rng(seed)
        self.disagg = config.mode == "disagg"
        perfs = pool_perfs(config, perf)
        self.decode_perf = perfs["decode" if self.disagg else "agg"]
        self.pools = build_pools(config, self.env, self.rng, perfs, fast_forward=fast_forward,
            on_prefilled=self._on_prefilled, on_finish=self._on_finish)  # fmt: skip
        self.decode = self.pools["decode"] if self.disagg else self.pools["agg"]
        self.entry = self.pools["prefill"] if self.disagg else self.pools["agg"]
        self.links = (
            KVLinks.between(config, self.entry.perf, self.decode.perf) if self.disagg else None
        )
        block_size = self.decode.engine.block_size
        self._spec_steps, self._spec_extra = speculative_plan(config, requests, seed, block_size)
        # Host processes (dynosim.host): a tokenised request re-enters the arrival heap as
        # id + n; the client's view of first and last tokens comes from the replica's clock.
        self.host = build_host(config, len(requests), self.entry, self.decode)
        self._streams = self.host is not None and self.host.streams
        self.rec = Recorder(requests, self.pools, self.host)
        self.handover = None if self.links is None else Handover(
            self.env, self.decode, self.links, legs=self.rec.state, worker=self.rec.worker,
            transfer_us=self.rec.transfer_us)  # fmt: skip
        self._heap, self._followers = arrival_heap(requests, self.speedup)
        self._warmup_left = 0  # completions until the warm-up phase has drained (run())
        self._dispatch_at = _NEVER
        self._dispatch_version = 0
        self._open = len(requests)  # requests neither finished nor rejected
        self._max_kv_tokens = self.decode.perf.kv_blocks * self.decode.engine.block_size
        self._entry_kv_tokens = self.entry.perf.kv_blocks * self.entry.engine.block_size
        e = self.entry.engine
        self._max_prompt = None if e.enable_chunked_prefill else e.max_num_batched_tokens
        d = self.decode.engine
        self._local_prompt = None if d.enable_chunked_prefill else d.max_num_batched_tokens
        self._monitor: MonitorState | None = None
        self.planner = (
            Planner(config.planner, self.pools, config.slo) if config.planner is not None else None
        )
        self.observer = build_observer(config, self.env, self.pools, self.planner,
            self.rec.samples, sample_interval_s, busy=lambda: self._open > 0)  # fmt: skip

    @property
    def workers(self) -> list[EngineWorker]:
        """Every worker of every pool (prefill pool first), in creation order."""
        return [w for p in self.pools.values() for w in p.workers]

    # ------------------------------------------------------------------ arrivals
    def _push(self, at_us: int, rid: int) -> None:
        heapq.heappush(self._heap, (at_us, rid))
        if at_us < self._dispatch_at:
            self._schedule_dispatch(at_us)

    def _schedule_dispatch(self, at_us: int) -> None:
        self._dispatch_at = at_us
        self._dispatch_version += 1
        at(self.env, at_us, NORMAL, self._on_dispatch, self._dispatch_version)

    def _on_dispatch(self, version: int) -> None:
        if version != self._dispatch_version:
            return
        now = int(self.env._now)
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, rid = heapq.heappop(heap)
            if rid < len(self.requests):
                self._arrive(rid, now)
            else:  # tokenised by the host: route it now
                self._route(rid - len(self.requests), now)
        if heap:
            self._schedule_dispatch(heap[0][0])
        else:
            self._dispatch_at = _NEVER

    def _arrive(self, rid: int, now: int) -> None:
        r = self.requests[rid]
        self.rec.arrival_us[rid] = now
        if self.planner is not None:  # what the planner sees of the traffic
            self.observer.window.on_arrival(r)
        reason = self._never_fits(r)
        if reason is not None:
            self.rec.rejections[rid] = reason
            self._open -= 1
            if self._monitor is not None:
                self._monitor.on_reject(rid)
            self._release_followers(rid, now)
            return
        if self._monitor is not None:
            self._monitor.on_arrival(rid)
        host = self.host
        if host is not None and host.tokenizes:
            ready = host.tokenized_us(rid, now, r.input_tokens, len(self.entry.active))
            self._push(ready, rid + len(self.requests))
            return
        self._route(rid, now)

    def _route(self, rid: int, now: int) -> None:
        """Send request ``rid`` (arrived, and tokenised if a host does it) to its worker."""
        r = self.requests[rid]
        if not self.disagg:
            rr = self._leg(rid)
            self._serve_local(rid, self.decode.route(rr, now), now, rr)
            return
        if self.config.max_local_prefill_tokens > 0:
            rr = self._leg(rid)
            w = self.decode.route(rr, now)
            if self._local_fits(rr, w):
                self._serve_local(rid, w, now, rr)
                return
            # Remote: the decode worker stays the one chosen now (Dynamo's conditional
            # disaggregation: the decode worker that received the request waits for its KV).
            assert self.handover is not None
            self.handover.commit(rid, w, r.input_tokens)
        pr = RunningRequest(r, prefix_caching=self.entry.engine.enable_prefix_caching, max_tokens=1)
        self.rec.prefill_state[rid] = pr
        pw = self.entry.route(pr, now)
        self.rec.prefill_worker[rid] = pw.index
        pw.enqueue(pr, now)

    def _leg(self, rid: int, remote: int = 0) -> RunningRequest:
        prefix = self.decode.engine.enable_prefix_caching
        rr: RunningRequest
        if self._streams:  # the host streams its tokens from its first
            rr = StreamedRequest(self.requests[rid], prefix_caching=prefix, remote=remote,
                                 on_first=self._on_first_token)  # fmt: skip
        else:
            rr = RunningRequest(self.requests[rid], prefix_caching=prefix, remote=remote)
        if self._spec_steps is not None:  # speculative decoding: verify steps, not tokens
            rr.max_tokens = int(self._spec_steps[rid])
            rr.extra_blocks = int(self._spec_extra[rid])
        return rr

    def _on_first_token(self, rr: RunningRequest, now: int) -> None:
        assert self.host is not None
        rid = rr.req.id
        self.host.first_token(rid, int(self.rec.worker[rid]), now)

    def _serve_local(self, rid: int, w: EngineWorker, now: int, rr: RunningRequest) -> None:
        """``rr`` (the request ``rid``, the one its router saw) is served by ``w`` from now."""
        self.rec.state[rid] = rr
        self.rec.worker[rid] = w.index
        w.enqueue(rr, now)

    def _local_fits(self, rr: RunningRequest, w: EngineWorker) -> bool:
        """Whether the prompt's uncached part on ``w`` is short enough to prefill there."""
        if self._local_prompt is not None and rr.target > self._local_prompt:
            return False
        limit = min(len(rr.hashes), (rr.target - 1) // HASH_BLOCK_TOKENS)
        hit = w.kv.match(rr.hashes, limit) if limit > 0 else 0
        return rr.target - hit * HASH_BLOCK_TOKENS <= self.config.max_local_prefill_tokens

    def _never_fits(self, r: Request) -> str | None:
        kv_tokens = r.input_tokens + r.output_tokens - 1
        where = "a decode worker" if self.disagg else "a worker"
        if kv_tokens > self._max_kv_tokens:
            return f"needs {kv_tokens} KV tokens; {where} holds {self._max_kv_tokens}"
        if self.disagg and r.input_tokens > self._entry_kv_tokens:
            return (
                f"needs {r.input_tokens} KV tokens to prefill; a prefill worker holds "
                f"{self._entry_kv_tokens}"
            )
        if self._max_prompt is not None and r.input_tokens > self._max_prompt:
            return (
                f"prompt of {r.input_tokens} tokens exceeds max_num_batched_tokens "
                f"{self._max_prompt} with chunked prefill off"
            )
        return None

    # -------------------------------------------------------------- disaggregation
    def _on_prefilled(self, pr: RunningRequest, now: int) -> None:
        """A prefill leg is done: its decode leg is handed over (:class:`Handover`)."""
        rid = pr.req.id
        if self.entry.draining:
            self.entry.check_drained(self.entry.workers[self.rec.prefill_worker[rid]], now)
        rr = self._leg(rid, remote=pr.req.input_tokens - 1)
        rr.cached_tokens = pr.cached_tokens
        assert self.handover is not None
        self.handover.send(rr, now)

    # ----------------------------------------------------------------- completion
    def _on_finish(self, rr: RunningRequest, now: int) -> None:
        rid = rr.req.id
        first, shown = rr.first_token_us, now  # as the client sees them
        if self._streams:
            assert self.host is not None
            first, shown = self.host.deliver(
                rid, int(self.rec.worker[rid]), first, now, rr.req.output_tokens
            )
        self.rec.finish_us[rid] = shown
        self._open -= 1
        if self.planner is not None:  # what the planner sees of the latencies
            self.observer.window.on_finish(rr.req, self.rec.arrival_us[rid], first, shown)
        if self.decode.draining:
            self.decode.check_drained(self.decode.workers[self.rec.worker[rid]], now)
        self._release_followers(rid, shown)
        if self._monitor is not None:
            self._monitor.on_finish(rid, shown)

    def _release_followers(self, rid: int, now: int) -> None:
        if self._warmup_left:  # one more request of the warm-up phase done
            self._warmup_left -= 1
            if not self._warmup_left:
                self._release_followers(WARMUP_PHASE, now)
        for fid in self._followers.pop(rid, ()):
            f = self.requests[fid]
            k = self.speedup
            self._push(max(now + to_us(f.delay_s / k), to_us(f.arrival_s / k)), fid)

    # ---------------------------------------------------------------------- run
    def run(self, *, warmup_requests: int = 0, stop: SLOMonitor | None = None) -> SimResult:
        """Simulate until every request has completed or been rejected.

        Args:
            warmup_requests: The first this many requests to complete are not measured; the
                requests sent ``after_warmup`` wait for them.
            stop: End the run as soon as one of its SLO rules can no longer be met; the
                result then says so in ``metrics.early_stop`` and counts only what happened.
        """
        start = time.perf_counter()
        if stop is not None and not stop.empty:
            from dynosim.slo_monitor import MonitorState  # only a stopping run builds it

            self._monitor = MonitorState(
                stop,
                self.env,
                slo=self.config.slo,
                arrival_us=self.rec.arrival_us,
                first_token_us=self.rec.first_token_us,
                output_tokens=[r.output_tokens for r in self.requests],
                warmup_requests=warmup_requests,
            )
            self._monitor.start()
        held = len(self._followers.get(WARMUP_PHASE, ()))
        if held:
            self._warmup_left = min(warmup_requests, len(self.requests) - held)
            if not self._warmup_left:
                self._release_followers(WARMUP_PHASE, 0)
        if self._heap:
            self._schedule_dispatch(self._heap[0][0])
        self.observer.start()
        run(self.env)
        wall = time.perf_counter() - start
        early = self._monitor.reason if self._monitor is not None else None
        if self.handover is not None:
            self.rec.kv_bytes_received = self.handover.bytes_received
        return self.rec.result(
            self.config,
            warmup_requests,
            wall_s=wall,
            early_stop=early,
            gpu_hour_usd=self.decode_perf.gpu_hour_usd,
            sampled=self.observer.sampled,
            kv_bytes_sent=self.links.bytes_sent if self.links is not None else 0,
        )


def simulate(
    config: DeploymentConfig,
    requests: Sequence[Request],
    *,
    seed: int = 0,
    warmup_requests: int = 0,
    fast_forward: bool = True,
    stop: SLOMonitor | None = None,
    speedup: float = 1.0,
    sample_interval_s: float | None = None,
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
    sim = Simulation(
        config,
        requests,
        seed=seed,
        fast_forward=fast_forward,
        speedup=speedup,
        sample_interval_s=sample_interval_s,
    )
    return sim.run(warmup_requests=warmup_requests, stop=stop).metrics
