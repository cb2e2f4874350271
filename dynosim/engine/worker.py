"""One engine worker: iteration-level continuous batching, stepped in time.

The worker keeps the mechanics every backend shares: a waiting queue, the requests being
prefilled, the decoding requests (kept as aggregates over a decode step counter), the KV
blocks, step boundaries and fast-forward. *Which* requests a step holds is the backend's
scheduling policy: a subclass in :mod:`dynosim.engine.policies` implements
:meth:`EngineWorker._start_step` (vLLM v1, SGLang, TRT-LLM) and calls :meth:`_launch`.

Fast-forward (one scheduled event for many decode-only steps) is
:class:`~dynosim.engine.segment.DecodeSegments`, which this class extends.

Time is integer microseconds. Step boundaries are scheduled with simpy's URGENT priority so
that at an equal instant they run before arrivals: an arrival at a boundary's instant joins at
the next boundary, in both modes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import simpy
from simpy.events import NORMAL, URGENT

from dynosim.config import EngineConfig
from dynosim.engine.batch import FinishCallback
from dynosim.engine.decode_runs import DecodeRuns
from dynosim.engine.kv_cache import PrefixKVCache
from dynosim.engine.segment import DecodeSegments
from dynosim.engine.state import RunningRequest
from dynosim.perf.protocol import StepTimeModel
from dynosim.timer import at
from dynosim.types import HASH_BLOCK_TOKENS

if TYPE_CHECKING:
    from dynosim.engine.lockstep import LockstepGroup

TokensCallback = Callable[["EngineWorker", Sequence[int], int, int], None]
"""``(worker, step ends, tokens of each step, first tokens of the last step)``."""


class EngineWorker(DecodeSegments):
    """A serving engine: a waiting queue, a running batch and a KV cache, stepped in time.

    A scheduling policy is a subclass (:mod:`dynosim.engine.policies`). It overrides these
    hooks, all called by this class (the last two by its base's
    :meth:`~dynosim.engine.segment.DecodeSegments._start_segment`):

    * :meth:`_start_step` (required): form the step at a boundary and end with :meth:`_launch`;
    * :meth:`_setup`: read the policy's own engine settings, once, at the end of ``__init__``;
    * :meth:`on_idle`: the worker ran out of work;
    * :meth:`_admissible_after`: where a decode-only segment must be cut because the waiting
      head may become admissible during it (only when admission can change without a finish);
    * :meth:`_received_after`: where it must be cut because the scheduler receives the
      requests of :attr:`inbox` there (a policy that does not receive at every iteration).

    and forms steps with the helpers of :class:`~dynosim.engine.batch.Batch`, which keep the
    queue, the decode aggregate and the KV blocks consistent (``_prefix_hit``, ``_pinned``,
    ``_take``, ``_preempt``, ``_next_step_blocks``), and :meth:`_launch` (schedule the step
    formed). It reads the
    queues (``waiting``, ``prefilling``, ``running``), ``kv``, the engine limits (``budget``,
    ``max_seqs``, ``chunked``, ``block_size``) and the decode aggregate (``n_decode``,
    ``n_paged``, ``decode_clock``, ``decode_steps``, ``_phase``). Itself it only reorders the
    waiting queue, pops the request it passes to :meth:`_take`, and allocates the blocks of
    the step it forms (``kv.allocate``, ``rr.blocks``).

    Attributes:
        steps: Engine steps completed so far.
        events: Step boundaries processed so far (one per step when stepping).
        busy_us: Total duration of the engine steps completed so far, in microseconds (a
            fast-forwarded segment counts the steps up to the boundary that ended it, so a
            segment cut short counts only the steps it ran); the same in both modes.
    """

    remote_decodes = False
    """Whether a request whose prompt's KV came from a prefill worker enters decoding at once.

    vLLM's NIXL connector has the decode worker compute the prompt's last token (an engine
    step needs one token to sample from); SGLang's decode server puts a transferred request in
    a "prebuilt" batch, a "fake completed prefill" (``get_new_prebuilt_batch``,
    ``sglang/srt/disaggregation/decode.py``), and TensorRT-LLM's generation server makes it a
    generation request with the context server's first token
    (``_prepare_disagg_gen_transmission_complete``). Here such a request still takes one step
    to join the decoding batch (its first token comes at that step's end), priced as the decode
    it is (:meth:`_price`).
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
        runs: DecodeRuns | None = None,
    ) -> None:
        super().__init__(engine, kv, on_finish)
        self.index = index
        self.env = env
        self.timing = timing
        self.runs = runs if runs is not None else DecodeRuns(timing)  # a pool shares one
        self.fast_forward = fast_forward
        self.max_seqs = engine.max_num_seqs
        self.budget = engine.max_num_batched_tokens
        self.chunked = engine.enable_chunked_prefill
        self.decode_steps = 0  # steps that decoded (what the policies count; as decode_clock)
        self._step_decodes = False
        self.busy = False
        self._version = 0
        self._step_prefill: list[tuple[RunningRequest, int]] = []
        self.steps = 0
        self.events = 0
        self.busy_us = 0
        # Requests routed here that the scheduler has not received yet (a policy that receives
        # only at some iterations: SGLang's scheduler_recv_interval).
        self.inbox: list[RunningRequest] = []
        # Requests routed here whose KV is still crossing the link (disaggregated serving).
        self.incoming = 0
        self.incoming_blocks = 0
        # Told the tokens each completed step emitted (a host streaming them; None: nobody):
        # ``on_tokens(worker, ends, n, firsts)`` at each boundary, before its completions,
        # with the end of every step the boundary closes (one, or a fast-forwarded
        # segment's), the decoding requests' one token per step each, and the requests whose
        # prompt the last step completed (each emits its first token). The same calls, step
        # for step, in both modes.
        self.on_tokens: TokensCallback | None = None
        # A router's list of workers whose load may have changed (None: no router watches):
        # the worker appends itself once (``touched``) at each event and each sync that
        # changes what the router reads; the router re-reads it at its next decision.
        self.watch: list[EngineWorker] | None = None
        self.touched = False
        # The replica's attention-DP ranks this worker steps together with (None: alone).
        self.group: LockstepGroup | None = None
        self._setup(engine)

    def _setup(self, engine: EngineConfig) -> None:
        """A policy's own settings from ``engine`` (called at the end of ``__init__``)."""

    # ----------------------------------------------------------------- views for the router
    @property
    def outstanding(self) -> int:
        """Requests routed here and not finished (in KV transfer or not yet received too)."""
        return len(self.running) + len(self.waiting) + len(self.inbox) + self.incoming

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

    def lags(self, now_us: int) -> bool:
        """Whether :meth:`sync` at ``now_us`` would allocate (a segment step started since)."""
        return now_us >= self._sync_at

    def kv_load_range(self, now_us: int) -> tuple[float, float]:
        """Bounds of :attr:`kv_load_blocks` after a :meth:`sync` at ``now_us``, without one."""
        kv = self.kv  # kv_load_blocks' terms (kv.used, pending_prefill_blocks), inline
        held, queued = (
            kv.total_blocks - kv.free - kv.evictable_blocks,
            self.pending_prefill / self.block_size,
        )
        low = held + queued + self.incoming_blocks
        if now_us >= self._sync_at:  # a segment step started since: its blocks may come
            held += -(-(self._seg_steps - 1) // self.block_size) * self.n_paged - self._seg_demand
        return low, held + queued + self.incoming_blocks

    def touch(self) -> None:
        """Tell the watching router (if any) that what it reads of this worker may change."""
        watch = self.watch
        if watch is not None and not self.touched:
            self.touched = True
            watch.append(self)

    def sync(self, now_us: int) -> None:
        """Bring the KV state up to ``now_us`` inside a fast-forwarded segment."""
        if now_us >= self._sync_at:  # a segment step has started since the last allocation
            self._apply_allocations(min(self._ended(now_us) + 1, self._seg_steps))

    # ----------------------------------------------------------------------- input
    def enqueue(self, rr: RunningRequest, now_us: int) -> None:
        """Accept a routed request at ``now_us``.

        An idle worker forms its first step at the end of this instant (after the other
        arrivals already due now), so requests that arrive together start together, as an
        engine loop that wakes up finds every request its queue received meanwhile.
        """
        if self.watch is not None:  # touch(), without a call when no router watches
            self.touch()
        rr.enqueued_us = now_us
        self.waiting.append(rr)
        self.pending_prefill += rr.target - rr.remote
        if not self.busy:
            self.busy = True
            if self.group is not None:  # it joins the replica's next step
                self.group.join(self, now_us)
                return
            self._version += 1
            at(self.env, now_us, NORMAL, self._on_wake, self._version)
        elif self._seg_steps > 1:
            self._cut(now_us)

    def _on_wake(self, version: int) -> None:
        if version == self._version:
            if self.watch is not None:
                self.touch()
            self._start_step(int(self.env._now))

    # ------------------------------------------------------------------- stepping
    def _schedule(self, at_us: int) -> None:
        self._version += 1
        env = self.env  # at(env, at_us, URGENT, ...), inline: a call per step boundary
        entry = (at_us, URGENT, next(env._eid), self._on_boundary, self._version)
        heapq.heappush(env._queue, entry)  # type: ignore[misc]

    def _on_boundary(self, version: int) -> None:
        """The scheduled step (or segment) ends now: account for it, form the next."""
        if version != self._version:
            return
        now = int(self.env._now)  # not the now property: a call less
        if self.watch is not None:
            self.touch()
        self.events += 1
        k = self._seg_steps
        if k > self._seg_applied:
            self._apply_allocations(k)
        if self.on_tokens is not None:
            firsts = sum(1 for rr, c in self._step_prefill if rr.computed + c == rr.target)
            n = self.n_decode if self._step_decodes else 0
            self.on_tokens(self, self._end_list(k) if k > 1 else [now], n, firsts)
        if self._step_decodes:
            self.decode_clock += k
            self.decode_steps += k
        self.steps += k
        self.busy_us += now - self._seg_start
        heap = self._finish_heap
        while heap and heap[0][0] <= self.decode_clock:
            fs, seq, rr = heapq.heappop(heap)
            if rr.finish_step == fs and rr.seq == seq:
                self._leave_decode(rr)
                self._finish(rr, now)
        kv = self.kv
        for rr, chunk in self._step_prefill:
            rr.computed += chunk
            self.pending_prefill -= chunk
            # The prefix cache takes the units the request has now computed in full.
            full = rr.computed // HASH_BLOCK_TOKENS
            if full > rr.n_units_seen and rr.n_units_seen < len(rr.hashes):
                full = min(full, len(rr.hashes))
                rr.units += kv.register_all(rr.hashes[rr.n_units_seen : full])
                rr.n_units_seen = full
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
        """Form the next step at boundary ``now`` and :meth:`_launch` it (the policy)."""
        raise NotImplementedError

    def _launch(
        self,
        now: int,
        step_prefill: list[tuple[RunningRequest, int]],
        shapes: list[tuple[int, int]],
        *,
        decodes: bool,
        single: bool,
    ) -> None:
        """Schedule the end of the step just formed (or go idle if it is empty).

        Args:
            now: The boundary, in microseconds.
            step_prefill: ``(request, chunk)`` of every request prefilling in the step, whose
                KV blocks are allocated already.
            shapes: ``(chunk, context)`` of each, for the step-time model.
            decodes: Whether every decoding request generates a token in this step (their
                blocks for it are allocated already).
            single: Step once even if the step could be fast-forwarded (after a preemption).
        """
        self._step_prefill = step_prefill
        n = self.n_decode if decodes else 0
        if not step_prefill and n == 0:
            if self.waiting or self.n_decode:
                raise RuntimeError(f"worker {self.index} idle with {len(self.waiting)} waiting")
            self.busy = False
            self._seg_steps = 1
            self.on_idle()
            return
        self.busy = True
        self._step_decodes = n > 0
        self._seg_start = now
        # the KV the step's decoding requests attend (none decode in a prefill-only step: 0,
        # not the aggregate's clock-relative offset)
        kv_tokens = self._len_offset + n * (self.decode_clock + 1) if n else 0
        group = self.group
        if group is not None:  # the replica's step: when its slowest rank ends
            group.formed(self, n, kv_tokens, shapes, single)
            return
        if step_prefill or not self.fast_forward or single:
            self._seg_steps = 1
            if self.remote_decodes:
                us = self._price(shapes, n, kv_tokens)
            else:  # what _price returns then, without its call on every such step
                us = self.timing.step_us(shapes, n, kv_tokens)
            self._schedule(now + us)
            return
        self._start_segment(now, n, kv_tokens)

    def _price(self, shapes: list[tuple[int, int]], n: int, kv_tokens: int) -> int:
        """Duration of the step formed (:attr:`_step_prefill`, ``shapes``, ``n`` decodes).

        Where the backend takes a request whose KV was transferred straight into decoding
        (:attr:`remote_decodes`), its one computed token is priced as a decode of its whole
        prompt, not as a prefill chunk.
        """
        if self.remote_decodes:
            m = kv = 0
            for rr, _ in self._step_prefill:
                if rr.remote:
                    m += 1
                    kv += rr.target
            if m:
                own = [sh for (rr, _), sh in zip(self._step_prefill, shapes, strict=True)
                       if not rr.remote]  # fmt: skip
                return self.timing.step_us(own, n + m, kv_tokens + kv)
        return self.timing.step_us(shapes, n, kv_tokens)

    def on_idle(self) -> None:
        """Called when the worker runs out of work (a policy may reset its state)."""

    def _admissible_after(self, k: int) -> int:
        """Steps of a ``k``-step segment to run before the policy would admit a request.

        The segment stops at the first boundary where the waiting head becomes admissible
        (stepping re-checks admission at every boundary), or where requests admitted but not
        computing (held, :attr:`prefilling`) start. vLLM and TRT-LLM admission only changes
        when a request finishes, which ends the segment anyway: ``k``.
        """
        return k

    def _received_after(self, k: int) -> int:
        """Steps of a ``k``-step segment to run before the scheduler receives its inbox.

        Only a policy that fills :attr:`inbox` (receives requests at some iterations only)
        overrides it.
        """
        return k
