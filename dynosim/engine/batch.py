"""A worker's requests and their KV blocks: the queues, the decode aggregate, admitting and leaving.

:class:`Batch` is the bookkeeping half of :class:`~dynosim.engine.worker.EngineWorker` (which
adds time: step boundaries, fast-forwarded segments, the router's views). The scheduling
policies (:mod:`dynosim.engine.policies`) form steps with its helpers, which keep the queue,
the decode aggregate and the KV blocks consistent: :meth:`Batch._prefix_hit` and
:meth:`Batch._pinned` (what admitting a request would reuse and take from the evictable
pool), :meth:`Batch._take` (admit it), :meth:`Batch._preempt` (free a running request and
queue it for recomputation) and :meth:`Batch._next_step_blocks` (new blocks of the next
decode step).

Decoding requests are kept as aggregates over a decode step counter (``decode_clock``): a
request that joins at clock ``c`` with KV length ``L`` has length ``L + (clock - c)`` later,
so a step that decodes all of them touches none of them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from dynosim.config import EngineConfig
from dynosim.engine.kv_cache import PrefixKVCache
from dynosim.engine.state import RunningRequest
from dynosim.types import HASH_BLOCK_TOKENS

FinishCallback = Callable[[RunningRequest, int], None]


class Batch:
    """The requests of one worker and the KV blocks they hold."""

    def __init__(self, engine: EngineConfig, kv: PrefixKVCache, on_finish: FinishCallback) -> None:
        self.kv = kv
        self.on_finish = on_finish
        self.block_size = engine.block_size
        self.waiting: deque[RunningRequest] = deque()
        self.pending_prefill = 0
        self.running: dict[int, RunningRequest] = {}
        self.prefilling: list[RunningRequest] = []
        self._next_seq = 0
        # Decoding requests, kept as aggregates over the decode step counter.
        self.decode_clock = 0
        self.n_decode = 0
        self.n_paged = 0  # decoding requests that take a new block every block_size steps
        self._len_offset = 0
        # _phase[r]: decoding requests whose KV length is a multiple of the block size (so
        # the next token needs a new block) at every step counter s with -s % block_size == r.
        self._phase = [0] * self.block_size
        self._finish_heap: list[tuple[int, int, RunningRequest]] = []

    def _next_step_blocks(self) -> int:
        """New KV blocks the decoding requests take in the next decode step."""
        return self._phase[-self.decode_clock % self.block_size] if self.n_paged else 0

    # ----------------------------------------------------------------- admission
    def _prefix_hit(self, rr: RunningRequest) -> int:
        """Cached leading units of ``rr``'s prompt (its last token is always computed)."""
        limit = min(len(rr.hashes), (rr.target - 1) // HASH_BLOCK_TOKENS)
        return self.kv.match(rr.hashes, limit) if limit > 0 else 0

    def _pinned(self, rr: RunningRequest, hit: int) -> int:
        """Evictable blocks among ``rr``'s ``hit`` cached units.

        Acquiring them takes them from what an allocation could evict.
        """
        return self.kv.evictable_among(rr.hashes[:hit]) * self.kv.unit_blocks if hit else 0

    def _take(self, rr: RunningRequest, hit: int, start: int, need: int, now: int) -> None:
        """Admit ``rr`` (already off the queue).

        It takes its ``hit`` cached units and ``need`` new blocks (plus its ``extra_blocks``,
        held until it leaves); its first ``start`` prompt tokens need no compute.
        """
        kv = self.kv
        hit_units = rr.hashes[:hit]
        self.pending_prefill -= start - rr.remote
        kv.acquire(hit_units)
        kv.allocate(need + rr.extra_blocks)
        rr.units = list(hit_units)
        rr.n_units_seen = hit
        rr.computed = start
        rr.blocks = hit * kv.unit_blocks + need
        if rr.preemptions == 0:
            rr.admitted_us = now
            if not rr.remote:  # a decode leg keeps the hit of its prefill leg
                rr.cached_tokens = hit * HASH_BLOCK_TOKENS
        rr.seq = self._next_seq
        self._next_seq += 1
        self.running[rr.seq] = rr
        self.prefilling.append(rr)

    # ------------------------------------------------------------ decode aggregate
    def _join_decode(self, rr: RunningRequest) -> None:
        rr.clock_at_join = self.decode_clock
        rr.generated_at_join = rr.generated
        rr.kv_len_at_join = rr.computed
        off = rr.kv_len_at_join - rr.clock_at_join
        if not rr.reserved:  # a request holding its whole KV takes no blocks while decoding
            self._phase[off % self.block_size] += 1
            self.n_paged += 1
        self._len_offset += off
        self.n_decode += 1
        rr.finish_step = self.decode_clock + rr.max_tokens - rr.generated_at_join
        heapq.heappush(self._finish_heap, (rr.finish_step, rr.seq, rr))

    def _leave_decode(self, rr: RunningRequest) -> None:
        steps = self.decode_clock - rr.clock_at_join
        kv_len = rr.kv_len_at_join + steps
        rr.generated = rr.generated_at_join + steps
        rr.computed = kv_len
        off = rr.kv_len_at_join - rr.clock_at_join
        if not rr.reserved:
            rr.blocks = -(-kv_len // self.block_size)
            self._phase[off % self.block_size] -= 1
            self.n_paged -= 1
        self._len_offset -= off
        self.n_decode -= 1
        rr.finish_step = -1

    # ------------------------------------------------------------ leaving the batch
    def _finish(self, rr: RunningRequest, now: int) -> None:
        del self.running[rr.seq]
        self.kv.release(rr.units, rr.blocks + rr.extra_blocks)
        rr.blocks = 0
        self.on_finish(rr, now)

    def _preempt(self, rr: RunningRequest, *, front: bool = True) -> None:
        """Preempt running ``rr``: free its blocks; it waits to be recomputed.

        It joins the queue at the head if ``front``, else at the tail.
        """
        del self.running[rr.seq]
        if rr.finish_step >= 0:
            self._leave_decode(rr)
        else:
            self.prefilling.remove(rr)
            self.pending_prefill -= rr.target - rr.computed
        self.kv.release(rr.units, rr.blocks + rr.extra_blocks)
        rr.units = []
        rr.blocks = 0
        rr.computed = 0
        rr.n_units_seen = 0
        rr.remote = 0  # the transferred KV is gone: recomputed here
        rr.target = rr.req.input_tokens + rr.generated
        rr.preemptions += 1
        if front:
            self.waiting.appendleft(rr)
        else:
            self.waiting.append(rr)
        self.pending_prefill += rr.target
