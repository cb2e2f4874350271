"""One engine worker: iteration-level continuous batching as vLLM v1 schedules it.

Each engine step (one forward pass) is formed at a step boundary: decoding requests get one
token each, partly prefilled requests continue in admission order, then waiting requests are
admitted first-come-first-served while ``max_num_seqs``, the ``max_num_batched_tokens`` budget
and free KV blocks allow (chunked prefill splits a prompt over several steps). When a step
needs more KV blocks than are free or evictable, the most recently admitted request is
preempted (its blocks freed, recomputed later) and no new request is admitted that step.

Fast-forward: while only decoding requests run and nothing can be admitted, the batch is the
same from step to step until the first completion, so one scheduled event covers many steps.
The segment is cut at the first step boundary after an arrival routed here, and ends before
the first step whose new KV blocks would exceed what is available (that step is then formed
normally, with preemption) or, while a request waits, would evict a cached prefix.
``fast_forward=False`` steps one iteration per event and is the reference the fast path must
match exactly.

Time is integer microseconds. Step boundaries are scheduled with simpy's URGENT priority so
that at an equal instant they run before arrivals: an arrival at a boundary's instant joins at
the next boundary, in both modes.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Callable

import simpy
from simpy.events import URGENT

from dynosim.config import EngineConfig
from dynosim.engine.kv_cache import PrefixKVCache
from dynosim.engine.state import RunningRequest
from dynosim.perf.protocol import StepTimeModel
from dynosim.timer import schedule_timer
from dynosim.types import HASH_BLOCK_TOKENS

FinishCallback = Callable[[RunningRequest, int], None]
_NEVER = 1 << 62


class EngineWorker:
    """A serving engine: a waiting queue, a running batch and a KV cache, stepped in time.

    Attributes:
        steps: Engine steps completed so far.
        events: Step boundaries processed so far (one per step when stepping).
        busy_us: Total duration of the engine steps completed so far, in microseconds (a
            fast-forwarded segment counts the steps up to the boundary that ended it, so a
            segment cut short counts only the steps it ran); the same in both modes.
    """

    def __init__(
        self,
        index: int,
        env: simpy.Environment,
        *,
        engine: EngineConfig,
        kv: PrefixKVCache,
        timing: StepTimeModel,
        on_finish: FinishCallback,
        fast_forward: bool = True,
    ) -> None:
        self.index = index
        self.env = env
        self.kv = kv
        self.timing = timing
        self.on_finish = on_finish
        self.fast_forward = fast_forward
        self.max_seqs = engine.max_num_seqs
        self.budget = engine.max_num_batched_tokens
        self.block_size = engine.block_size
        self.chunked = engine.enable_chunked_prefill
        self.waiting: deque[RunningRequest] = deque()
        self.pending_prefill = 0
        self.running: dict[int, RunningRequest] = {}
        self.prefilling: list[RunningRequest] = []
        self._next_seq = 0
        # Decoding requests, kept as aggregates over the decode step counter S.
        self.S = 0
        self.n_decode = 0
        self._len_offset = 0
        # _phase[r]: decoding requests whose KV length is a multiple of the block size (so
        # the next token needs a new block) at every step counter s with -s % block_size == r.
        self._phase = [0] * self.block_size
        self._finish_heap: list[tuple[int, int, RunningRequest]] = []
        # The scheduled segment: _seg_steps steps from the last boundary.
        self.busy = False
        self._version = 0
        self._step_prefill: list[tuple[RunningRequest, int]] = []
        self._seg_steps = 1
        self._seg_ends: list[int] = [0]  # when each step of the segment ends
        self._seg_applied = 1
        self._seg_demand = 0
        self._seg_top = 0
        self._seg_start = 0
        self._sync_at = _NEVER
        self.steps = 0
        self.events = 0
        self.busy_us = 0
        # Requests routed here whose KV is still crossing the link (disaggregated serving).
        self.incoming = 0
        self.incoming_blocks = 0

    # ----------------------------------------------------------------- views for the router
    @property
    def outstanding(self) -> int:
        """Requests routed here and not finished (those still in KV transfer count too)."""
        return len(self.running) + len(self.waiting) + self.incoming

    @property
    def pending_prefill_blocks(self) -> float:
        """Prompt blocks routed here and not yet prefilled (queued prompts count in full)."""
        return self.pending_prefill / self.block_size

    @property
    def kv_load_blocks(self) -> float:
        """KV blocks held, plus queued prompt blocks and blocks arriving by transfer.

        Read after :meth:`sync` (a fast-forwarded worker's held blocks lag until then).
        """
        return self.kv.used + self.pending_prefill_blocks + self.incoming_blocks

    def sync(self, now_us: int) -> None:
        """Bring the KV state up to ``now_us`` inside a fast-forwarded segment."""
        if now_us >= self._sync_at:  # a segment step has started since the last allocation
            started = bisect_right(self._seg_ends, now_us) + 1
            self._apply_allocations(min(started, self._seg_steps))

    # ----------------------------------------------------------------------- input
    def enqueue(self, rr: RunningRequest, now_us: int) -> None:
        """Accept a routed request at ``now_us``; an idle worker starts a step at once."""
        rr.enqueued_us = now_us
        self.waiting.append(rr)
        self.pending_prefill += rr.target - rr.remote
        if not self.busy:
            self._start_step(now_us)
        elif self._seg_steps > 1:
            self._cut(now_us)

    # ------------------------------------------------------------------- stepping
    def _schedule(self, at_us: int) -> None:
        self._version += 1
        schedule_timer(self.env, at_us, self._version, self._on_boundary, URGENT)

    def _on_boundary(self, ev: simpy.Event) -> None:
        if ev._value != self._version:
            return
        now = int(self.env.now)
        self.events += 1
        k = self._seg_steps
        if k > self._seg_applied:
            self._apply_allocations(k)
        self.S += k
        self.steps += k
        self.busy_us += now - self._seg_start
        heap = self._finish_heap
        while heap and heap[0][0] <= self.S:
            fs, seq, rr = heapq.heappop(heap)
            if rr.finish_step == fs and rr.seq == seq:
                self._leave_decode(rr)
                self._finish(rr, now)
        for rr, chunk in self._step_prefill:
            rr.computed += chunk
            self.pending_prefill -= chunk
            self._register_units(rr)
            if rr.computed == rr.target:
                self.prefilling.remove(rr)
                rr.generated += 1
                if rr.first_token_us < 0:
                    rr.first_token_us = now
                if rr.generated >= rr.max_tokens:
                    self._finish(rr, now)
                else:
                    self._join_decode(rr)
        self._start_step(now)

    def _start_step(self, now: int) -> None:
        """Form the next step at boundary ``now`` and schedule its end (or go idle)."""
        kv, bs = self.kv, self.block_size
        preempted = False
        while True:
            demand = self._phase[-self.S % bs] if self.n_decode else 0
            left = self.budget - self.n_decode
            plan: list[tuple[RunningRequest, int, int]] = []
            for rr in self.prefilling:
                if left <= 0:
                    break
                chunk = min(rr.target - rr.computed, left)
                need = -(-(rr.computed + chunk) // bs) - rr.blocks
                plan.append((rr, chunk, need))
                demand += need
                left -= chunk
            if demand <= kv.free + kv.evictable_blocks:
                break
            self._preempt_last()
            preempted = True
        if demand:
            kv.allocate(demand)
        step_prefill: list[tuple[RunningRequest, int]] = []
        shapes: list[tuple[int, int]] = []
        for rr, chunk, need in plan:
            rr.blocks += need
            step_prefill.append((rr, chunk))
            shapes.append((chunk, rr.computed))
        if self.waiting and not preempted:
            left = self._admit(left, step_prefill, shapes, now)
        self._step_prefill = step_prefill
        n = self.n_decode
        if not step_prefill and n == 0:
            if self.waiting:
                raise RuntimeError(f"worker {self.index} idle with {len(self.waiting)} waiting")
            self.busy = False
            self._seg_steps = 1
            return
        self.busy = True
        self._seg_start = now
        kv_tokens = self._len_offset + n * (self.S + 1)
        if step_prefill or not self.fast_forward or preempted:
            self._seg_steps = 1
            self._schedule(now + self.timing.step_us(shapes, n, kv_tokens))
            return
        self._start_segment(now, n, kv_tokens)

    def _start_segment(self, now: int, n: int, kv_tokens: int) -> None:
        """Schedule a decode-only segment up to the first completion or KV shortage."""
        heap = self._finish_heap
        while heap[0][2].finish_step != heap[0][0] or heap[0][2].seq != heap[0][1]:
            heapq.heappop(heap)
        k = heap[0][0] - self.S
        if k > 1:
            bs = self.block_size
            self._seg_top = (-self.S - 1) % bs  # the phase of step S + 1
            # With a request waiting, stop before the first eviction: evicting a cached unit
            # can shrink its prefix hit, unpin blocks and make it admissible (stepping re-checks
            # admission every step). With nobody waiting, evictions change nothing here.
            cap = self.kv.free if self.waiting else self.kv.available
            # Every request takes at most one block per block_size steps: usually that fits.
            if -(-(k - 1) // bs) * n > cap and self._demand(k - 1) > cap:
                k = bisect_right(range(k), cap, key=self._demand)  # demand is monotone
        ends = self.timing.decode_run_us(n, kv_tokens, k).cumsum()
        ends += now
        self._seg_ends = ends_list = ends.tolist()  # bisect on a list beats numpy per call
        self._seg_steps = k
        self._seg_applied = 1
        self._seg_demand = 0
        self._sync_at = ends_list[0] if k > 1 else _NEVER
        self._schedule(ends_list[-1])

    def _demand(self, m: int) -> int:
        """New KV blocks of the ``m`` decode steps after the segment's first.

        In every ``block_size`` consecutive steps each decoding request takes one block; the
        ``m % block_size`` remaining steps take those of the phases they pass through, from
        ``_seg_top`` (the phase of step ``S + 1``) downwards, wrapping around.
        """
        bs = self.block_size
        full, rest = divmod(m, bs)
        total = full * self.n_decode
        if rest:
            top, phase = self._seg_top, self._phase
            if rest <= top + 1:
                total += sum(phase[top + 1 - rest : top + 1])
            else:
                total += sum(phase[: top + 1]) + sum(phase[bs + top + 1 - rest :])
        return total

    def _cut(self, now: int) -> None:
        """End the segment at the first step boundary strictly after ``now``."""
        j = bisect_right(self._seg_ends, now)
        if j + 1 < self._seg_steps:
            self._seg_steps = j + 1
            if self._seg_applied > j:
                self._sync_at = _NEVER
            self._schedule(self._seg_ends[j])

    def _apply_allocations(self, started: int) -> None:
        """Allocate the new blocks of segment steps up to ``started`` (step 0 already is)."""
        if started > self._seg_applied:
            demand = self._demand(started - 1)
            self.kv.allocate(demand - self._seg_demand)
            self._seg_demand = demand
            self._seg_applied = started
            k = self._seg_steps
            self._sync_at = self._seg_ends[started - 1] if started < k else _NEVER

    # ----------------------------------------------------------------- admission
    def _admit(
        self,
        left: int,
        step_prefill: list[tuple[RunningRequest, int]],
        shapes: list[tuple[int, int]],
        now: int,
    ) -> int:
        kv, bs, unit = self.kv, self.block_size, self.kv.unit_blocks
        waiting = self.waiting
        while waiting and left > 0 and len(self.running) < self.max_seqs:
            rr = waiting[0]
            limit = min(len(rr.hashes), (rr.target - 1) // HASH_BLOCK_TOKENS)
            hit = kv.match(rr.hashes, limit) if limit > 0 else 0
            hit_tokens = hit * HASH_BLOCK_TOKENS
            start = max(hit_tokens, rr.remote)  # transferred KV needs no compute either
            remaining = rr.target - start
            chunk = min(remaining, left)
            if chunk < remaining and not self.chunked and not rr.preemptions:
                break  # a recompute after preemption may span steps, or it would never fit
            need = -(-(start + chunk) // bs) - hit * unit
            hit_units = rr.hashes[:hit]
            pinned = kv.evictable_among(hit_units) * unit if hit else 0
            if need > kv.available - pinned:
                break
            waiting.popleft()
            self.pending_prefill -= start - rr.remote
            kv.acquire(hit_units)
            kv.allocate(need)
            rr.units = list(hit_units)
            rr.n_units_seen = hit
            rr.computed = start
            rr.blocks = hit * unit + need
            if rr.preemptions == 0:
                rr.admitted_us = now
                if not rr.remote:  # a decode leg keeps the hit of its prefill leg
                    rr.cached_tokens = hit_tokens
            rr.seq = self._next_seq
            self._next_seq += 1
            self.running[rr.seq] = rr
            self.prefilling.append(rr)
            step_prefill.append((rr, chunk))
            shapes.append((chunk, start))
            left -= chunk
        return left

    def _register_units(self, rr: RunningRequest) -> None:
        full = min(rr.computed // HASH_BLOCK_TOKENS, len(rr.hashes))
        if full > rr.n_units_seen:
            rr.units += self.kv.register_all(rr.hashes[rr.n_units_seen : full])
            rr.n_units_seen = full

    # ------------------------------------------------------------ decode aggregate
    def _join_decode(self, rr: RunningRequest) -> None:
        rr.s0 = self.S
        rr.g0 = rr.generated
        rr.len0 = rr.computed
        off = rr.len0 - rr.s0
        self._phase[off % self.block_size] += 1
        self._len_offset += off
        self.n_decode += 1
        rr.finish_step = self.S + rr.max_tokens - rr.g0
        heapq.heappush(self._finish_heap, (rr.finish_step, rr.seq, rr))

    def _leave_decode(self, rr: RunningRequest) -> None:
        steps = self.S - rr.s0
        kv_len = rr.len0 + steps
        rr.generated = rr.g0 + steps
        rr.computed = kv_len
        rr.blocks = -(-kv_len // self.block_size)
        off = rr.len0 - rr.s0
        self._phase[off % self.block_size] -= 1
        self._len_offset -= off
        self.n_decode -= 1
        rr.finish_step = -1

    # ------------------------------------------------------------ leaving the batch
    def _finish(self, rr: RunningRequest, now: int) -> None:
        del self.running[rr.seq]
        self.kv.release(rr.units, rr.blocks)
        rr.blocks = 0
        self.on_finish(rr, now)

    def _preempt_last(self) -> None:
        """Preempt (recompute) the most recently admitted running request."""
        seq = next(reversed(self.running))
        rr = self.running.pop(seq)
        if rr.finish_step >= 0:
            self._leave_decode(rr)
        else:
            self.prefilling.remove(rr)
            self.pending_prefill -= rr.target - rr.computed
        self.kv.release(rr.units, rr.blocks)
        rr.units = []
        rr.blocks = 0
        rr.computed = 0
        rr.n_units_seen = 0
        rr.remote = 0  # the transferred KV is gone: recomputed here
        rr.target = rr.req.input_tokens + rr.generated
        rr.preemptions += 1
        self.waiting.appendleft(rr)
        self.pending_prefill += rr.target
