"""The planner: every adjustment interval, set each pool's worker count from what it observed.

It sees what Dynamo's planner sees, sampled every ``metric_pulling_interval_s``: per pool, the
waiting requests and the KV-cache usage of the active workers; and the requests that arrived
in the interval (rate, mean input and output lengths). Policies and their defaults are
described on :class:`dynosim.config.PlannerConfig`. A decision never takes a pool outside its
``min_workers``/``max_workers`` nor the deployment above ``max_gpus`` (provisioned workers and
GPUs, with starting and draining workers counted).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import simpy
from simpy.events import EventPriority

from dynosim.cluster.pool import WorkerPool
from dynosim.config import PlannerConfig, PoolName, SLOConfig
from dynosim.timer import at
from dynosim.types import Request

TICK = EventPriority(2)
"""simpy priority of the observation tick: after boundaries (0) and arrivals (1) at its instant."""


@dataclass(slots=True)
class PoolSample:
    """One observation of one pool."""

    t_us: int
    provisioned: int
    active: int
    waiting: int
    running: int
    kv_usage: float


@dataclass(slots=True)
class Window:
    """What the planner gathered since its last decision."""

    samples: dict[str, list[PoolSample]] = field(default_factory=dict)
    arrivals: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    start_us: int = 0
    finished: int = 0
    ttft_us: int = 0
    decoded: int = 0  # requests with more than one output token among the finished
    itl_us: float = 0.0

    def on_arrival(self, req: Request) -> None:
        """Count an arrival: the traffic the planner sees."""
        self.arrivals += 1
        self.input_tokens += req.input_tokens
        self.output_tokens += req.output_tokens

    def on_finish(self, req: Request, arrival_us: int, first_us: int, finish_us: int) -> None:
        """Count a completion: the latencies the planner sees (as the client saw the tokens)."""
        self.finished += 1
        self.ttft_us += first_us - arrival_us
        if req.output_tokens > 1:
            self.decoded += 1
            self.itl_us += (finish_us - first_us) / (req.output_tokens - 1)


def sample(pool: WorkerPool, now_us: int) -> PoolSample:
    """The pool's state at ``now_us`` (fast-forwarded workers are brought up to it first)."""
    waiting = running = 0
    kv = 0.0
    for w in pool.active:
        w.sync(now_us)
        kv += w.kv.used / w.kv.total_blocks
    for w in (*pool.active, *pool.draining.values()):
        waiting += len(w.waiting) + len(w.inbox) + w.incoming
        running += len(w.running)
    n = len(pool.active)
    return PoolSample(now_us, pool.provisioned, n, waiting, running, kv / n if n else 0.0)


class Planner:
    """Decides scale-ups and scale-downs; :meth:`adjust` applies them to the pools."""

    def __init__(
        self, config: PlannerConfig, pools: Mapping[PoolName, WorkerPool], slo: SLOConfig
    ) -> None:
        self.config = config
        self.pools = pools
        self.slo = slo
        self.startup_us = round(config.startup_s * 1e6)

    def adjust(self, now_us: int, window: Window) -> None:
        """Apply one decision per pool, prefill (or agg) first, then decode."""
        targets = self._targets(now_us, window)
        for name, pool in self.pools.items():
            if pool.starting:
                continue  # Dynamo blocks adjustment while a pool is scaling
            lim = self.config.limits(name)
            want = min(max(targets[name], lim.min_workers), lim.max_workers)
            # a draining worker still holds its GPUs: it counts against max_workers
            while pool.serving < want and pool.provisioned < lim.max_workers and self._fits(pool):
                pool.add(now_us, self.startup_us)
            while pool.serving > want and pool.remove(now_us) is not None:
                pass

    def _fits(self, pool: WorkerPool) -> bool:
        cap = self.config.max_gpus
        return cap is None or sum(p.gpus for p in self.pools.values()) + pool.tp <= cap

    def _targets(self, now_us: int, window: Window) -> dict[str, int]:
        if self.config.policy == "sla":
            return self._sla_targets(now_us, window)
        return {name: self._load_target(name, pool, window) for name, pool in self.pools.items()}

    def _load_target(self, name: str, pool: WorkerPool, window: Window) -> int:
        """One worker more or less than now by Dynamo's load thresholds, or the same."""
        now = pool.serving
        samples = window.samples.get(name, [])
        if not samples:
            return now
        c = self.config
        queue = sum(s.waiting / max(s.active, 1) for s in samples) / len(samples)
        kv = sum(s.kv_usage for s in samples) / len(samples)
        if name == "prefill":
            up, down = queue > c.queue_scale_up, queue < c.queue_scale_down
        else:
            up = kv > c.kv_scale_up or queue > c.queue_scale_up
            down = kv < c.kv_scale_down and queue < c.queue_scale_down
        return now + 1 if up else now - 1 if down else now

    def _sla_targets(self, now_us: int, window: Window) -> dict[str, int]:
        """Workers that carry the last interval's traffic at the SLO (constant predictor)."""
        span_s = (now_us - window.start_us) / 1e6
        if window.arrivals == 0 or span_s <= 0:
            return dict.fromkeys(self.pools, 0)
        rate = window.arrivals / span_s
        isl = window.input_tokens / window.arrivals
        osl = window.output_tokens / window.arrivals
        ctx = isl + osl / 2
        prefill_need: dict[str, float] = {}
        decode_need: dict[str, float] = {}
        for n, p in self.pools.items():
            p_corr = min(1.0, self._prefill_correction(p, window, isl))
            prefill_need[n] = rate * isl * p_corr / prefill_tokens_per_s(p, isl)
            itl_ms = self.slo.itl_ms
            if itl_ms is not None:
                itl_ms /= self._decode_correction(n, p, window, ctx)
            decode_need[n] = rate * osl / decode_tokens_per_s(p, ctx, itl_ms)
        out: dict[str, int] = {}
        for name in self.pools:
            if name == "prefill":
                need = prefill_need[name]
            elif name == "decode":
                need = decode_need[name]
            else:  # one worker time-shares both phases
                need = prefill_need[name] + decode_need[name]
            out[name] = math.ceil(need - 1e-9)
        return out

    @staticmethod
    def _prefill_correction(pool: WorkerPool, window: Window, isl: float) -> float:
        """Observed mean TTFT over the model's time to prefill a mean prompt alone (1 if unseen)."""
        if window.finished == 0:
            return 1.0
        alone_us = pool.perf.timing.step_us([(max(1, round(isl)), 0)], 0, 0)
        return (window.ttft_us / window.finished) / alone_us

    def _decode_correction(self, name: str, pool: WorkerPool, window: Window, ctx: float) -> float:
        """Observed mean ITL over the model's step at the observed batch (>= 1; 1 if unseen)."""
        samples = window.samples.get(name, [])
        if window.decoded == 0 or not samples:
            return 1.0
        batch = sum(s.running / max(s.active, 1) for s in samples) / len(samples)
        n = max(1, round(batch))
        c = max(1, round(ctx))
        expected_us = pool.perf.timing.step_us((), n, n * c)
        return max(1.0, (window.itl_us / window.decoded) / expected_us)


class Observer:
    """The periodic observation of the pools: a tick after every other event of its instant.

    With a planner, every ``plan_us`` it samples each pool into the planner's :attr:`window`
    (and into the timeline, unless that has its own ``sample_us``) and, every ``adjust_us``,
    has the planner decide on that window, then opens a new one. With ``sample_us``, it also
    samples the pools into the timeline that often. Sampling only reads state (and brings a
    fast-forwarded worker's KV up to date, as routing does), so it changes nothing. The ticks
    stop once ``busy()`` (some request is still open) is false.

    Attributes:
        window: What the planner has gathered since its last decision.
        sampled: Whether the pools are sampled at all (there is a timeline).
    """

    def __init__(
        self,
        env: simpy.Environment,
        pools: Mapping[PoolName, WorkerPool],
        planner: Planner | None,
        timeline: Mapping[str, list[PoolSample]],
        *,
        plan_us: int | None,
        adjust_us: int,
        sample_us: int | None,
        busy: Callable[[], bool],
    ) -> None:
        self.env = env
        self.pools = pools
        self.planner = planner
        self.timeline = timeline
        self._plan_us = plan_us
        self._adjust_us = adjust_us
        self._sample_us = sample_us
        self._busy = busy
        self.sampled = bool(plan_us or sample_us)
        self.window = Window()
        self._next_adjust = 0

    def start(self) -> None:
        """Schedule the first ticks, at time 0 (none if no request is open)."""
        if self._plan_us is not None and self._busy():
            self._next_adjust = self._adjust_us
            at(self.env, 0, TICK, self._on_plan_tick, 0)
        if self._sample_us is not None and self._busy():
            at(self.env, 0, TICK, self._on_sample_tick, 0)

    def _on_plan_tick(self, _: int) -> None:
        """The planner's sample, and its decision when one is due."""
        now = int(self.env.now)
        win = self.window
        for name, pool in self.pools.items():
            s = sample(pool, now)
            win.samples.setdefault(name, []).append(s)
            if self._sample_us is None:
                self.timeline[name].append(s)
        assert self.planner is not None
        assert self._plan_us is not None
        if now >= self._next_adjust:
            self.planner.adjust(now, win)
            self.window = Window(start_us=now)
            self._next_adjust = now + self._adjust_us
        if self._busy():
            at(self.env, now + self._plan_us, TICK, self._on_plan_tick, 0)

    def _on_sample_tick(self, _: int) -> None:
        """A timeline sample."""
        now = int(self.env.now)
        for name, pool in self.pools.items():
            self.timeline[name].append(sample(pool, now))
        if self._busy():
            assert self._sample_us is not None
            at(self.env, now + self._sample_us, TICK, self._on_sample_tick, 0)


def prefill_tokens_per_s(pool: WorkerPool, isl: float) -> float:
    """Prompt tokens per second of one worker prefilling prompts of ``isl`` tokens back to back.

    A prompt is computed in ``max_num_batched_tokens`` chunks, each attending to the chunks
    before it, so long prompts are priced at their real context (attention grows with it).
    """
    chunk = pool.engine.max_num_batched_tokens
    total = max(1, round(isl))
    done = 0
    us = 0
    timing = pool.perf.timing
    while done < total:
        c = min(chunk, total - done)
        us += timing.step_us([(c, done)], 0, 0)
        done += c
    return total / (us / 1e6)


def decode_tokens_per_s(pool: WorkerPool, context: float, itl_ms: float | None) -> float:
    """Output tokens per second of one worker at the largest batch whose step meets ``itl_ms``.

    The batch is also capped by ``max_num_seqs`` and by the KV blocks (``context`` tokens per
    request); without an ITL bound it is the cap itself.
    """
    ctx = max(1, round(context))
    kv_tokens = pool.perf.kv_blocks * pool.engine.block_size
    cap = max(1, min(pool.engine.max_num_seqs, kv_tokens // ctx))
    timing = pool.perf.timing

    def step_us(n: int) -> int:
        return timing.step_us((), n, n * ctx)

    n = cap
    if itl_ms is not None and step_us(cap) > itl_ms * 1e3:
        lo, hi = 1, cap  # the largest n with step_us(n) <= bound (steps grow with n)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if step_us(mid) <= itl_ms * 1e3:
                lo = mid
            else:
                hi = mid - 1
        n = lo
    return n / (step_us(n) / 1e6)
