"""vLLM v1's scheduler, and TRT-LLM's, which differs in admission only.

vLLM: ``vllm/v1/core/sched/scheduler.py``.
A step is formed at a step boundary: decoding requests get one token each, partly prefilled
requests continue in admission order, then waiting requests are admitted first-come-first-
served while ``max_num_seqs``, the ``max_num_batched_tokens`` budget and free KV blocks allow
(chunked prefill splits a prompt over several steps, mixed into the decode step). When a step
needs more KV blocks than are free or evictable, the most recently admitted request is
preempted (its blocks freed, recomputed later) and no new request is admitted that step.

TRT-LLM's batch waiting (``batch_wait_timeout_iters`` ``T`` and ``batch_wait_max_tokens_ratio``
``r``, ``PyExecutor._waiting_requests`` in ``tensorrt_llm/_torch/pyexecutor/py_executor.py``;
InferenceX's Llama-3.1-70B TRT-LLM recipes pass ``T = 20``, ``r = 0.9``): in an iteration that
schedules both context and generation requests, the context requests run only if the waiting
counter has reached ``T`` or the iteration's tokens (each context request's prompt, one per
generation request) reach ``r x max_num_tokens``; otherwise they wait (the iteration decodes
only) and the counter grows by one. Running them resets it. An iteration without generation
requests never waits. Here the held requests are admitted (their KV taken) and compute nothing
until released; a fast-forwarded decode segment ends at the boundary where the counter releases
them, and the counter counts the segment's steps, so both modes hold the same iterations. With
attention DP TRT-LLM does not batch-wait (``_schedule``: ``not self.enable_attention_dp``); its
ranks balance contexts instead (:class:`~dynosim.engine.lockstep.AdpBalance`).
"""

from __future__ import annotations

from dynosim.config import EngineConfig
from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.types import HASH_BLOCK_TOKENS


class VllmWorker(EngineWorker):
    """An engine scheduled as vLLM v1 schedules it."""

    reserve_output = False
    """Reserve the KV blocks of a request's whole output at admission (TRT-LLM)."""

    def _setup(self, engine: EngineConfig) -> None:
        """TRT-LLM's batch waiting (0 / 0.0: off; engine fields of TRT-LLM only)."""
        self.wait_iters = engine.batch_wait_timeout_iters or 0
        self.wait_ratio = engine.batch_wait_max_tokens_ratio or 0.0
        self.wait_count = 0  # TRT-LLM's batch_wait_iters_count
        # Either at 0 releases every time (count >= 0, tokens >= 0): no waiting at all.
        self.waits = self.wait_iters > 0 and self.wait_ratio > 0
        self._held = False  # the step (or segment) running holds its context requests

    def _hold(self, step_prefill: list[tuple[RunningRequest, int]]) -> bool:
        """Whether this iteration's context requests wait (TRT-LLM's batch waiting).

        A request whose KV came from a prefill worker (``remote``; here it computes its last
        prompt token, as vLLM's NIXL connector does) is a generation request for TRT-LLM
        (``DISAGG_GENERATION_TRANS_COMPLETE``: the context server sent its first token), never
        held.
        """
        if not self.n_decode:
            return False
        contexts = [rr.target for rr, _ in step_prefill if not rr.remote]
        if not contexts:
            return False
        tokens = sum(contexts) + self.n_decode + len(step_prefill) - len(contexts)
        if self.wait_count >= self.wait_iters or tokens >= self.wait_ratio * self.budget:
            self.wait_count = 0
            return False
        self.wait_count += 1
        return True

    def _admissible_after(self, k: int) -> int:
        """A held segment ends at the boundary where the counter releases the contexts.

        The boundary ``j`` of the segment sees the counter at ``count + j - 1``
        (``count``: its value after the segment's first step); nothing else the decision
        reads changes inside a segment (no arrival, no finish; admission only changes at a
        finish). Unheld: admission changes only when a request finishes, which ends the
        segment anyway.
        """
        if not self._held:
            return k
        return min(k, self.wait_iters - self.wait_count + 1)

    def _start_step(self, now: int) -> None:
        """Form the next step at boundary ``now`` and schedule its end (or go idle)."""
        if self._held:  # the held boundaries inside the segment that just ended
            self.wait_count += self._seg_steps - 1
            self._held = False
        kv, bs = self.kv, self.block_size
        preempted = False
        while True:
            # _next_step_blocks(), inline (a call per step)
            demand = self._phase[-self.decode_clock % bs] if self.n_paged else 0
            left = self.budget - self.n_decode
            plan: list[tuple[RunningRequest, int, int]] = []
            for rr in self.prefilling:
                if left <= 0:
                    break
                chunk = min(rr.target - rr.computed, left)
                need = 0 if rr.reserved else -(-(rr.computed + chunk) // bs) - rr.blocks
                plan.append((rr, chunk, need))
                demand += need
                left -= chunk
            if demand <= kv.free + kv.evictable_blocks:
                break
            self._preempt(self.running[next(reversed(self.running))])
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
            self._admit(left, step_prefill, shapes, now)
        if self.waits and step_prefill and self.group is None and self._hold(step_prefill):
            self._held = True
            kept = [i for i, (rr, _) in enumerate(step_prefill) if rr.remote]
            step_prefill, shapes = [step_prefill[i] for i in kept], [shapes[i] for i in kept]
        self._launch(now, step_prefill, shapes, decodes=True, single=preempted)

    def _admit(
        self,
        left: int,
        step_prefill: list[tuple[RunningRequest, int]],
        shapes: list[tuple[int, int]],
        now: int,
    ) -> int:
        kv, bs, unit = self.kv, self.block_size, self.kv.unit_blocks
        waiting = self.waiting
        reserve = self.reserve_output
        while waiting and left > 0 and len(self.running) < self.max_seqs:
            rr = waiting[0]
            hit = self._prefix_hit(rr)
            start = max(hit * HASH_BLOCK_TOKENS, rr.remote)  # transferred KV: no compute either
            remaining = rr.target - start
            chunk = min(remaining, left)
            if chunk < remaining and not self.chunked and not rr.preemptions:
                break  # a recompute after preemption may span steps, or it would never fit
            # Blocks now: the computed part, or (reserving) the whole sequence at its end.
            upto = rr.target + rr.max_tokens - rr.generated - 1 if reserve else start + chunk
            need = -(-upto // bs) - hit * unit
            # _pinned(rr, hit) and kv.available, inline (calls per admission)
            pinned = kv.evictable_among(rr.hashes[:hit]) * unit if hit else 0
            if need + rr.extra_blocks + pinned > kv.free + kv.evictable_blocks:
                break
            waiting.popleft()
            self._take(rr, hit, start, need, now)
            rr.reserved = reserve
            step_prefill.append((rr, chunk))
            shapes.append((chunk, start))
            left -= chunk
        return left


class TrtllmWorker(VllmWorker):
    """TRT-LLM's in-flight batching (``tensorrt_llm/_torch/pyexecutor/scheduler.py``).

    Generation requests first, then context chunks within ``max_num_tokens``
    (``max_num_batched_tokens``) and ``max_batch_size`` (``max_num_seqs``), as vLLM does. The
    capacity scheduler decides admission: ``GUARANTEED_NO_EVICT`` (the default) admits a
    request only if the KV blocks of its whole sequence, prompt and every output token, can be
    reserved now, so a running request never runs short and nothing is ever evicted;
    ``MAX_UTILIZATION`` packs requests as vLLM does and pauses the newest on a shortage (its KV
    is freed and recomputed later): :class:`VllmWorker` serves it. Batch waiting (the module
    docstring) applies with either.
    """

    reserve_output = True
    remote_decodes = True


class TrtllmPackingWorker(VllmWorker):
    """TRT-LLM with ``MAX_UTILIZATION``: vLLM's packing and pausing, TRT-LLM's disaggregation."""

    remote_decodes = True
