"""Fast-forwarded decode segments: one scheduled event for many engine steps.

While only decoding requests run and nothing can be admitted, the batch is the same from step
to step until the first completion, so one scheduled event covers many steps. The segment is
cut at the first step boundary after an arrival routed here, and ends before the first step
whose new KV blocks would exceed what is available (that step is then formed normally, with
the policy's preemption) or, while a request waits, would evict a cached prefix; a policy whose
admission can change during a segment cuts it where it would
(:meth:`~dynosim.engine.worker.EngineWorker._admissible_after`). ``fast_forward=False`` steps
one iteration per event and is the reference the fast path must match exactly, for every
policy.

The KV blocks of a segment's steps are allocated lazily: at the boundary that ends it, or
when a router reads the worker in between (:meth:`DecodeSegments._apply_allocations`).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING

from dynosim.config import EngineConfig
from dynosim.engine.batch import Batch, FinishCallback
from dynosim.engine.decode_runs import I64, NO_SUMS, DecodeRuns
from dynosim.engine.kv_cache import PrefixKVCache
from dynosim.engine.state import RunningRequest

if TYPE_CHECKING:
    from dynosim.engine.lockstep import LockstepGroup

_NEVER = 1 << 62


class DecodeSegments(Batch):
    """A worker's scheduled segment: when its steps end, cutting it, its lazy KV allocations.

    The base of :class:`~dynosim.engine.worker.EngineWorker`, which sets up the attributes
    annotated here, schedules the boundaries (``_schedule``) and defines the policy hooks.
    """

    runs: DecodeRuns
    inbox: list[RunningRequest]
    _schedule: Callable[[int], None]
    touch: Callable[[], None]
    _admissible_after: Callable[[int], int]
    _received_after: Callable[[int], int]
    group: LockstepGroup | None

    def __init__(self, engine: EngineConfig, kv: PrefixKVCache, on_finish: FinishCallback) -> None:
        super().__init__(engine, kv, on_finish)
        # The scheduled segment: _seg_steps steps from the last boundary (_seg_start).
        self._seg_steps = 1
        # Step j (from 1) of the segment ends at _seg_base + _seg_sums[_seg_t0 + j]. _seg_ends
        # views the same sums as Python ints: reading and bisecting it makes no numpy scalars.
        self._seg_sums, self._seg_t0, self._seg_base = NO_SUMS, 0, 0
        self._seg_ends = NO_SUMS.data
        self._seg_applied = 1
        self._seg_demand = 0
        self._seg_top = 0
        self._seg_start = 0
        self._sync_at = _NEVER

    @property
    def in_segment(self) -> bool:
        """Whether a fast-forwarded segment has steps whose blocks are not allocated yet."""
        return self._sync_at != _NEVER

    def _start_segment(self, now: int, n: int, kv_tokens: int) -> None:
        """Schedule a decode-only segment up to the first completion or KV shortage."""
        k = self._segment_steps()
        # The running sums of the steps' durations, from the pool's memo (DecodeRuns).
        sums, t0 = self.runs.sums(n, kv_tokens, k)
        self._install(now, sums, t0, k)
        self._schedule(self._end(k))

    def _segment_steps(self) -> int:
        """Steps a decode-only segment from this boundary may run (1: step once).

        Up to the first completion, before the first step whose KV blocks do not fit, and
        where the policy would admit or receive a request (stepping re-checks at every
        boundary). Sets the block phase of the next step (``_seg_top``) for :meth:`_demand`.
        """
        heap = self._finish_heap
        while heap[0][2].finish_step != heap[0][0] or heap[0][2].seq != heap[0][1]:
            heapq.heappop(heap)
        k = heap[0][0] - self.decode_clock
        if k > 1:
            bs = self.block_size
            self._seg_top = (-self.decode_clock - 1) % bs  # the phase of the next step
            # With a request waiting, stop before the first eviction: evicting a cached unit
            # can shrink its prefix hit, unpin blocks and make it admissible (stepping re-checks
            # admission every step). With nobody waiting, evictions change nothing here.
            cap = self.kv.free if self.waiting else self.kv.available
            # Every request takes at most one block per block_size steps: usually that fits.
            paged = self.n_paged
            if -(-(k - 1) // bs) * paged > cap and self._demand(k - 1) > cap:
                k = bisect_right(range(k), cap, key=self._demand)  # demand is monotone
            if k > 1 and (self.waiting or self.prefilling):
                k = self._admissible_after(k)
            if k > 1 and self.inbox:
                k = self._received_after(k)
        return k

    def _install(self, now: int, sums: I64, t0: int, k: int) -> None:
        """Make the ``k`` steps from boundary ``now`` the segment.

        Step ``j`` ends at ``now + sums[t0 + j] - sums[t0]``.
        """
        self._seg_sums, self._seg_t0 = sums, t0
        self._seg_ends = sums.data
        self._seg_base = now - int(sums[t0])
        self._seg_steps = k
        self._seg_applied = 1
        self._seg_demand = 0
        self._sync_at = self._end(1) if k > 1 else _NEVER

    def _end(self, j: int) -> int:
        """When step ``j`` (from 1) of the current segment ends."""
        return self._seg_base + self._seg_ends[self._seg_t0 + j]

    def _ended(self, now: int) -> int:
        """Steps of the current segment ended by ``now`` (the segment's ends, bisected)."""
        t0 = self._seg_t0
        hi = t0 + self._seg_steps + 1
        return bisect_right(self._seg_ends, now - self._seg_base, t0 + 1, hi) - t0 - 1

    def _end_list(self, k: int) -> list[int]:
        """When each of the first ``k`` steps of the current segment ends."""
        t0 = self._seg_t0
        return (self._seg_sums[t0 + 1 : t0 + k + 1] + self._seg_base).tolist()  # type: ignore[no-any-return]

    def _demand(self, m: int) -> int:
        """New KV blocks of the ``m`` decode steps after the segment's first.

        In every ``block_size`` consecutive steps each decoding request takes one block; the
        ``m % block_size`` remaining steps take those of the phases they pass through, from
        ``_seg_top`` (the phase of step ``decode_clock + 1``) downwards, wrapping around.
        """
        bs = self.block_size
        full, rest = divmod(m, bs)
        total = full * self.n_paged
        if rest:
            top, phase = self._seg_top, self._phase
            if rest <= top + 1:
                total += sum(phase[top + 1 - rest : top + 1])
            else:
                total += sum(phase[: top + 1]) + sum(phase[bs + top + 1 - rest :])
        return total

    def _cut(self, now: int) -> None:
        """End the segment at the first step boundary strictly after ``now``."""
        self._cut_to(self._ended(now) + 1)

    def _cut_to(self, steps: int) -> None:
        """End the segment after its first ``steps`` steps (nothing if it has no more)."""
        if steps < self._seg_steps:
            if self.group is not None:  # the replica's ranks step together: cut them all
                self.group.cut_to(steps)
                return
            self._shorten(steps)
            self._schedule(self._end(steps))

    def _shorten(self, steps: int) -> None:
        """Make the segment end after its first ``steps`` steps (fewer than it has)."""
        self._seg_steps = steps
        if self._seg_applied >= steps:
            self._sync_at = _NEVER

    def _apply_allocations(self, started: int) -> None:
        """Allocate the new blocks of segment steps up to ``started`` (step 0 already is)."""
        if started > self._seg_applied:
            demand = self._demand(started - 1)
            if demand > self._seg_demand:  # else nothing the router reads changes
                self.touch()
                self.kv.allocate(demand - self._seg_demand)
                self._seg_demand = demand
            self._seg_applied = started
            self._sync_at = _NEVER if started >= self._seg_steps else self._end(started)
