"""SGLang's scheduler (``sglang/srt/managers/scheduler.py``, ``schedule_policy.py``).

Each iteration runs one batch. A *prefill batch* is tried first: the request being chunked
(at most one) continues, then waiting requests are admitted in queue order (``lpm``: longest
cached prefix first, FCFS beyond 128 waiting, as SGLang falls back) while

* ``max_running_requests`` (``max_num_seqs``) is not reached,
* the prompt tokens of the batch stay within ``max_prefill_tokens`` (the first request is
  always taken) and the chunk budget ``chunked_prefill_size`` (``max_num_batched_tokens``; a
  longer prompt is cut and becomes *the* chunked request, which ends the batch),
* the KV pool can hold the request's uncached prompt plus ``min(max_new_tokens, 4096)``
  output tokens *after* the reservation of the running requests,
  ``new_token_ratio * sum(min(remaining output, 4096))`` (``PrefillAdder``).

Without ``enable_mixed_chunk`` (the default) a prefill batch runs alone: decoding requests
wait. Otherwise it carries one token for every decoding request too (and the chunk budget
shrinks by their number). With no prefill batch, all decoding requests run one decode step;
if its KV does not fit, requests are *retracted* (freed, queued at the tail, recomputed later)
in SGLang's order, fewest output tokens first (ties: longest prompt), until the rest can run
``retract_decode_steps`` (20) steps, and ``new_token_ratio`` jumps to
``min(1, (tokens decoded + 20 x requests) / max_new_tokens of the requests)``.

``new_token_ratio`` starts at ``0.7 x schedule_conservativeness``, falls by
``(init - 0.14 x init) / 600`` per decode batch down to ``0.14 x init``, and returns to the
start whenever the engine is idle (constants of ``sglang/srt/global_config.py``:
``default_init_new_token_ratio``, ``default_min_new_token_ratio_factor``,
``default_new_token_ratio_decay_steps``, ``retract_decode_steps``; the same in ai-dynamo's
mocker ``scheduler/sglang.rs``). The ratio is computed from the number of decode steps since
its last reset (``base - decay * m``, not by repeated subtraction), so stepping and
fast-forward see the same bits.

The radix cache is matched at the workload's hash-block granularity (as for every backend);
``block_size`` is SGLang's ``page_size`` (1-512).

``scheduler_recv_interval`` (``--scheduler-recv-interval``, default 1): the scheduler takes
the requests the tokenizer sent it (``recv_requests``) only when a counter reaches the
interval. Each iteration adds the weight of the batch it ran before: 1 for a decode batch,
1000 for any other (a prefill or mixed batch: the next iteration receives), 1 with no batch
(``SchedulerRecvSkipper``, ``sglang/srt/managers/scheduler_recv_skipper.py``: ``_DEFAULT_WEIGHT
= 1000``, ``ForwardMode.DECODE: 1``, ``None: 1``); receiving resets it to 0. So while the
engine only decodes, a new request waits in the socket up to ``interval`` decode steps
(InferenceX's DeepSeek-R1 SGLang recipes pass 30 at concurrency >= 16: "relax to ~30
requests between scheduler recv polls"). An engine with nothing to run loops without a batch
in microseconds, so it receives at once; so does an idle one woken by a request. Requests
routed here and not yet received wait in :attr:`inbox` (routers and the planner count them);
a fast-forwarded decode segment ends at the boundary where they are received, as stepping
would receive them.
"""

from __future__ import annotations

import numpy as np

from dynosim.config import EngineConfig
from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.types import HASH_BLOCK_TOKENS

CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
LPM_FALLBACK_QUEUE = 128
DEFAULT_MAX_PREFILL_TOKENS = 16384
RECV_WEIGHT_NOT_DECODE = 1000
"""What a prefill or mixed batch adds to the receive counter (``_DEFAULT_WEIGHT``)."""


class SglangWorker(EngineWorker):
    """An engine scheduled as SGLang schedules it (see the module docstring)."""

    remote_decodes = True

    def _setup(self, engine: EngineConfig) -> None:
        """SGLang's own knobs and the state of ``new_token_ratio``."""
        self.mixed = bool(engine.enable_mixed_chunk)
        self.max_prefill = engine.max_prefill_tokens or DEFAULT_MAX_PREFILL_TOKENS
        # A cache-aware policy with the radix cache off is FCFS (SchedulePolicy).
        self.lpm = engine.schedule_policy == "lpm" and engine.enable_prefix_caching
        cons = engine.schedule_conservativeness
        self.init_ratio = min(INIT_NEW_TOKEN_RATIO * (1.0 if cons is None else cons), 1.0)
        self.min_ratio = min(self.init_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay = (self.init_ratio - self.min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self._ratio_base = self.init_ratio
        self._ratio_from = 0  # decode_steps when the ratio was last reset
        self.retractions = 0
        self.recv_interval = engine.scheduler_recv_interval or 1
        self._recv_count = 0  # the receive counter after the last iteration formed
        self._idle = True  # no batch ran since the engine was last idle

    # ------------------------------------------------------------- new_token_ratio
    @property
    def new_token_ratio(self) -> float:
        """SGLang's ``new_token_ratio`` now."""
        m = self.decode_steps - self._ratio_from
        return max(self._ratio_base - self.decay * (m if m > 0 else 0), self.min_ratio)

    def on_idle(self) -> None:
        """An idle SGLang scheduler resets ``new_token_ratio`` (``self_check_during_idle``)."""
        self._ratio_base = self.init_ratio
        self._ratio_from = self.decode_steps
        self._idle = True

    # ------------------------------------------------------------------- receiving
    def enqueue(self, rr: RunningRequest, now_us: int) -> None:
        """A busy engine with a receive interval holds the request until it receives."""
        if self.recv_interval == 1 or not self.busy:
            super().enqueue(rr, now_us)
            return
        self.touch()
        rr.enqueued_us = now_us
        self.inbox.append(rr)
        self.pending_prefill += rr.target - rr.remote
        if self._seg_steps > 1:  # end the segment where this iteration count receives
            first = self._ended(now_us) + 1
            self._cut_to(first + (-(self._recv_count + first)) % self.recv_interval)

    def _receive(self) -> None:
        """Advance the receive counter by the iterations since the last one formed; receive.

        A decode segment of ``k`` steps received (nothing) at every multiple of the interval
        it passed, so only the remainder is left.
        """
        t = self.recv_interval
        if self._idle:
            received = True
        elif self._step_prefill:
            self._recv_count += RECV_WEIGHT_NOT_DECODE
            received = self._recv_count >= t
        else:
            self._recv_count = (self._recv_count + self._seg_steps) % t
            received = self._recv_count == 0
        self._idle = False
        if not received and not (self.waiting or self.prefilling or self.n_decode):
            received = True  # no batch to run: the loop spins to the next receive at once
        if received:
            self._recv_count = 0
            if self.inbox:
                self.waiting.extend(self.inbox)
                self.inbox.clear()

    def _received_after(self, k: int) -> int:
        """A decode segment with requests in the inbox ends where they are received."""
        return min(k, self.recv_interval - self._recv_count)

    def _reserved_tokens(self) -> int:
        """Sum over decoding requests of ``min(remaining output, 4096)``."""
        s, clip = self.decode_clock, CLIP_MAX_NEW_TOKENS
        total = 0
        for rr in self.running.values():
            if rr.finish_step >= 0:
                rem = rr.finish_step - s
                total += rem if rem < clip else clip
        return total

    # ------------------------------------------------------------------- stepping
    def _start_step(self, now: int) -> None:
        if self.recv_interval > 1:
            self._receive()
        self._form_step(now)

    def _form_step(self, now: int) -> None:
        kv = self.kv
        step_prefill: list[tuple[RunningRequest, int]] = []
        shapes: list[tuple[int, int]] = []
        if not self.mixed:
            self._prefill_batch(now, step_prefill, shapes)
            if step_prefill:
                self._launch(now, step_prefill, shapes, decodes=False, single=False)
                return
        # The decode batch (mixed: with the prefill batch riding on it).
        demand = self._next_step_blocks()
        retracted = demand > kv.available
        if retracted:
            self._retract()
            demand = self._next_step_blocks()
        if demand:
            kv.allocate(demand)
        if self.mixed and not retracted:
            self._prefill_batch(now, step_prefill, shapes)
        elif retracted and not self.n_decode:  # everything was retracted: prefill again
            self._form_step(now)
            return
        self._launch(now, step_prefill, shapes, decodes=True, single=retracted)

    def _head(self) -> RunningRequest:
        """The waiting request the policy takes next (and puts at the head of the queue)."""
        waiting = self.waiting
        if self.lpm and 1 < len(waiting) <= LPM_FALLBACK_QUEUE:
            best = max(range(len(waiting)), key=lambda i: (self._prefix_hit(waiting[i]), -i))
            if best:
                rr = waiting[best]
                del waiting[best]
                waiting.appendleft(rr)
        return waiting[0]

    def _needs(self, rr: RunningRequest) -> tuple[int, int, int, int]:
        """``(hit units, start, KV tokens to reserve, uncached prompt tokens)``."""
        hit = self._prefix_hit(rr)
        start = max(hit * HASH_BLOCK_TOKENS, rr.remote)
        extend = rr.target - start
        out = rr.max_tokens - rr.generated
        tokens = extend + (out if out < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS)
        return hit, start, tokens, extend

    def _blocks(self, rr: RunningRequest, hit: int, start: int, chunk: int) -> tuple[int, int]:
        """``(new blocks of its first chunk, free or evictable blocks its admission needs)``.

        The second adds its ``extra_blocks`` and the evictable blocks of its own cached prefix
        (taken from the evictable pool as it acquires them).
        """
        need = -(-(start + chunk) // self.block_size) - hit * self.kv.unit_blocks
        return need, need + rr.extra_blocks + self._pinned(rr, hit)

    def _chunk_budget(self) -> int:
        return self.budget - (self.n_decode if self.mixed else 0)

    def _prefill_batch(
        self,
        now: int,
        step_prefill: list[tuple[RunningRequest, int]],
        shapes: list[tuple[int, int]],
    ) -> None:
        kv, bs = self.kv, self.block_size
        left_chunk = self._chunk_budget() if self.chunked else 1 << 62
        left_input = self.max_prefill
        if self.prefilling and left_chunk > 0:  # the chunked request continues first
            rr = self.prefilling[0]
            chunk = min(rr.target - rr.computed, left_chunk)
            need = -(-(rr.computed + chunk) // bs) - rr.blocks
            # (SGLang would run out of memory here; free decoding requests instead.)
            while need > kv.available and self._retract_one(min_decoders=0, prefilling=False):
                pass
            if need > kv.available:
                return
            kv.allocate(need)
            rr.blocks += need
            step_prefill.append((rr, chunk))
            shapes.append((chunk, rr.computed))
            left_chunk -= chunk
            left_input -= chunk
            if rr.computed + chunk < rr.target:
                return  # still chunked: it takes the whole budget
        spent = 0
        ratio_reserved = -1.0
        waiting = self.waiting
        while waiting and left_chunk > 0 and left_input > 0 and len(self.running) < self.max_seqs:
            rr = self._head()
            hit, start, tokens, extend = self._needs(rr)
            if step_prefill and extend > left_input:
                break
            chunk = min(extend, left_chunk)
            need, required = self._blocks(rr, hit, start, chunk)
            if required > kv.available:
                break
            if self.running:
                if ratio_reserved < 0:
                    ratio_reserved = self.new_token_ratio * self._reserved_tokens()
                if tokens > kv.available * bs - ratio_reserved - spent:
                    break
            waiting.popleft()
            self._take(rr, hit, start, need, now)
            step_prefill.append((rr, chunk))
            shapes.append((chunk, start))
            spent += tokens
            left_chunk -= chunk
            left_input -= chunk
            if chunk < extend:
                break  # the new chunked request ends the batch

    # ---------------------------------------------------------------- retraction
    def _retract(self) -> None:
        """Retract decoding requests until the rest can run ``RETRACT_DECODE_STEPS`` steps.

        As SGLang, at least one is retracted and the last is kept; if the next step still does
        not fit (blocks held by a prefilling request), that one goes too.
        """
        kv, bs = self.kv, self.block_size
        per_request = -(-RETRACT_DECODE_STEPS // bs)
        first = True
        while first or kv.available < self.n_paged * per_request:
            first = False
            if not self._retract_one(min_decoders=1, prefilling=False):
                break
        for keep in (1, 0):
            while self._next_step_blocks() > kv.available:
                if not self._retract_one(min_decoders=keep, prefilling=True):
                    break
        decoding = [rr for rr in self.running.values() if rr.finish_step >= 0]
        if decoding:
            s = self.decode_clock
            done = sum(rr.generated_at_join + s - rr.clock_at_join for rr in decoding)
            total = sum(rr.max_tokens for rr in decoding)
            self._ratio_base = min(1.0, (done + RETRACT_DECODE_STEPS * len(decoding)) / total)
            self._ratio_from = self.decode_steps + 1  # the retracting step does not decay it

    def _retract_one(self, *, min_decoders: int, prefilling: bool) -> bool:
        """Retract one request; False if there is none to retract.

        A decoding request (SGLang's order) if more than ``min_decoders`` decode, else the newest
        prefilling one if ``prefilling``.
        """
        s = self.decode_clock
        victims = [rr for rr in self.running.values() if rr.finish_step >= 0]
        if len(victims) > min_decoders:
            rr = min(
                victims,
                key=lambda r: (
                    r.generated_at_join + s - r.clock_at_join,
                    -r.req.input_tokens,
                    -r.seq,
                ),
            )
        elif prefilling and self.prefilling:
            rr = self.prefilling[-1]
        else:
            return False
        self._preempt(rr, front=False)
        self.retractions += 1
        return True

    # -------------------------------------------------------------- fast-forward
    def _admissible_after(self, k: int) -> int:
        """Steps of this decode segment before the waiting head becomes admissible.

        Decoding lowers the output reservation of the running requests and, step by step,
        ``new_token_ratio``, while it takes KV blocks: a waiting request refused now can be
        admitted a few steps later. Evaluated for every boundary of the segment with the same
        arithmetic as :meth:`_prefill_batch` (integers, then one multiply and subtraction in
        float64), so the cut falls where stepping would admit it.
        """
        if not self.waiting or len(self.running) >= self.max_seqs:
            return k
        rr = self._head()
        hit, start, tokens, extend = self._needs(rr)
        bs = self.block_size
        chunk = extend if not self.chunked else min(extend, self._chunk_budget())
        _, required = self._blocks(rr, hit, start, chunk)
        j = np.arange(1, k, dtype=np.int64)  # boundaries inside the segment
        # Blocks taken by steps 2..j (step 1's are taken); mixed: also step j+1's.
        phase = np.asarray(self._phase, dtype=np.int64)
        steps = np.arange(1, k + (1 if self.mixed else 0), dtype=np.int64)
        per_step = phase[(-(self.decode_clock + steps)) % bs]
        taken = np.cumsum(per_step)
        before = taken[: k - 1] if self.mixed else np.concatenate(([0], taken[: k - 2]))
        avail = self.kv.available - before
        ok = required <= avail
        if not ok.any():
            return k
        s, clip = self.decode_clock, CLIP_MAX_NEW_TOKENS
        rems = np.sort(
            np.array([r.finish_step - s for r in self.running.values() if r.finish_step >= 0],
                     dtype=np.int64)
        )  # fmt: skip
        excess = rems - clip
        start_i = np.searchsorted(excess, j, side="right")
        suffix = np.concatenate((np.cumsum(excess[::-1])[::-1], [0]))
        over = suffix[start_i] - (len(excess) - start_i) * j
        reserved = (rems.sum() - len(rems) * j) - over
        m = self.decode_steps + j - self._ratio_from
        m = np.where(m > 0, m, 0)
        ratio = np.maximum(self._ratio_base - self.decay * m, self.min_ratio)
        ok &= tokens <= avail * bs - ratio * reserved
        hits = np.flatnonzero(ok)
        return int(j[hits[0]]) if hits.size else k
