"""The attention-DP ranks of one engine replica step together.

With attention data parallelism each rank holds its own batch and KV cache, but every rank
runs every iteration: the MoE layers exchange the ranks' tokens (all-to-all or all-gather) in
each forward, so an iteration ends when its slowest rank does, and a rank with nothing to run
joins with an empty (dummy) batch. Sources: TensorRT-LLM tech blog 10, "ADP Balance
Strategy" ("the execution time ... in any given iteration is bounded by the rank with the
highest workload", ``time_i = max_m time_{i,m}``), and each engine's idle-rank path: TensorRT-
LLM's attention-DP dummy requests (``_pad_attention_dp_dummy_request``), vLLM's data-parallel
engine core running a dummy batch while other ranks have work (``execute_dummy_batch``),
SGLang's idle batches under DP attention (``prepare_mlp_sync_batch``).

vLLM aligns its data-parallel ranks for MoE models only (its data-parallel deployment guide);
the ranks of a dense model there are independent engines (:mod:`dynosim.cluster.build`).

So the ranks of a replica share their step boundaries. At each boundary every rank whose step
ended accounts for it and forms its next (its own policy, its own queue and KV), ranks that
received their first request since join, and the replica's step lasts as long as the slowest
rank's. A decode-only stretch is fast-forwarded when every rank's would be: up to the first
boundary where any rank's batch changes (the shortest of the ranks' segments), each step as
long as the slowest rank's same step; an arrival at any rank cuts the whole replica at the
next boundary. A rank's own step price assumes every rank carries a batch like its own (as
AIConfigurator prices attention DP: its MoE ops for ``tokens x attention_dp``); the replica's MoE
layers run once over all the ranks' tokens, so each rank's price is moved by the MoE ops at the
ranks' mean tokens less those at its own (:meth:`LockstepGroup._moe_shift`), and one rank's long
prefill costs the others the step it holds them in, not the experts of that prefill on every
rank. TensorRT-LLM's balancing of context requests across the ranks is
:class:`~dynosim.engine.adp_balance.AdpBalance`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from simpy.events import NORMAL, URGENT

from dynosim.engine.adp_balance import (
    DEFAULT_BATCHING_WAIT_ITERS,
    DEFAULT_TIMEOUT_ITERS,
    AdpBalance,
)
from dynosim.timer import at

if TYPE_CHECKING:
    import simpy

    from dynosim.config import EngineConfig
    from dynosim.engine.worker import EngineWorker


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


class LockstepGroup:
    """The ranks of one attention-DP replica: one boundary for all, the slowest rank's.

    Attributes:
        ranks: The replica's ranks (workers), in index order.
        stepping: Whether a replica step is scheduled (some rank is running one).
        balance: TensorRT-LLM's context balancing across the ranks, if the engine enables it
            (:class:`~dynosim.engine.adp_balance.AdpBalance`; it holds the ranks' new context
            requests at the boundaries it decides).
    """

    __slots__ = (
        "_counts", "_formed", "_index", "_joining", "_members", "_moe", "_version", "balance",
        "env", "ranks", "stepping",
    )  # fmt: skip

    def __init__(
        self, env: simpy.Environment, ranks: Sequence[EngineWorker], engine: EngineConfig
    ) -> None:
        self.env = env
        self.ranks = list(ranks)
        self._index = {r: i for i, r in enumerate(self.ranks)}
        self.stepping = False
        self._version = 0
        self._formed: list[Formed] = []  # the steps the ranks formed at this boundary
        self.balance = (
            AdpBalance(
                timeout_iters=_or(engine.attention_dp_timeout_iters, DEFAULT_TIMEOUT_ITERS),
                batching_wait_iters=_or(
                    engine.attention_dp_batching_wait_iters, DEFAULT_BATCHING_WAIT_ITERS
                ),
                max_batch=engine.max_num_seqs,
            )
            if engine.attention_dp_enable_balance
            else None
        )
        self._counts: tuple[list[int], list[int]] = ([], [])  # the balance's numbers now
        # The ranks' MoE share (AicStepTime.moe_us through its wrappers), None where it is
        # zero at any size (a dense model, a model without the tables): nothing to reprice.
        moe = getattr(self.ranks[0].timing, "moe_us", None)
        self._moe = moe if moe is not None and moe(1e6, 0.0) + moe(0.0, 1e6) > 0 else None
        self._members: list[EngineWorker] = []  # the ranks in the scheduled step
        self._joining: list[EngineWorker] = []  # idle ranks that received a request since
        for r in self.ranks:
            r.group = self

    def join(self, rank: EngineWorker, now: int) -> None:
        """An idle ``rank`` received a request at ``now``: it steps from the next boundary.

        With no step running the replica wakes at the end of this instant (as an idle worker
        does); else the running step ends first (a fast-forwarded stretch is cut there).
        """
        self._joining.append(rank)
        if not self.stepping:
            if len(self._joining) == 1:
                self._version += 1
                at(self.env, now, NORMAL, self._on_boundary, self._version)
        elif self._members and self._members[0]._seg_steps > 1:
            self._members[0]._cut(now)

    def formed(
        self,
        rank: EngineWorker,
        n: int,
        kv_tokens: int,
        shapes: list[tuple[int, int]],
        single: bool,
    ) -> None:
        """``rank`` formed its step at this boundary (see :meth:`EngineWorker._launch`)."""
        self._formed.append((rank, n, kv_tokens, shapes, single))

    def cut_to(self, steps: int) -> None:
        """End the running stretch after its first ``steps`` steps, on every rank."""
        for r in self._members:
            r._shorten(steps)
        self._schedule(self._members[0]._end(steps))

    def _schedule(self, at_us: int) -> None:
        self._version += 1
        at(self.env, at_us, URGENT, self._on_boundary, self._version)

    def _on_boundary(self, version: int) -> None:
        if version != self._version:
            return
        now = int(self.env._now)
        self.stepping = True  # ranks that join while the others form wait for this loop
        members, self._members = self._members, []
        joining, self._joining = self._joining, []
        if self.balance is not None and members:  # the stretch's iterations after its first
            self.balance.advance(*self._counts, members[0]._seg_steps - 1)
        stepped, joined = set(members), set(joining)
        for r in self.ranks:  # in index order, in both modes
            if r in stepped:  # a rank schedules nothing of its own: its version is current
                r._on_boundary(r._version)
            elif r in joined:
                r._start_step(now)
        while self._joining:  # a request routed to an idle rank while the others formed
            joining, self._joining = self._joining, []
            for r in joining:
                r._start_step(now)
        self._launch(now)

    def _launch(self, now: int) -> None:
        """Schedule the replica's step from the steps its ranks formed (or go idle)."""
        formed, self._formed = self._formed, []
        if not formed:
            self.stepping = False
            return
        self.stepping = True
        self._members = [f[0] for f in formed]
        bal, held = self.balance, False
        if bal is not None:
            self._counts = counts = self._tally(formed)
            if not bal.decide(*counts) and any(counts[0]):
                held = True
                formed = [_without_contexts(*f) for f in formed]
        ff = self._members[0].fast_forward
        steps = [
            r._price(shapes, n, kv) if shapes or single or not ff else -1
            for r, n, kv, shapes, single in formed
        ]
        shift = self._moe_shift(formed)
        k = 1
        if all(us < 0 for us in steps):
            k = min(r._segment_steps() for r in self._members)
            if held and k > 1:
                assert bal is not None
                k = min(k, bal.held_for(*self._counts))
        if k == 1:
            step = max(
                max(1, (us if us >= 0 else r.timing.step_us((), n, kv)) + dt)
                for us, dt, (r, n, kv, _, _) in zip(steps, shift, formed, strict=True)
            )
            for r in self._members:
                r._seg_steps = 1
            self._schedule(now + step)
            return
        if len(formed) == 1 and not shift[0]:
            r, n, kv, _, _ = formed[0]
            sums, t0 = r.runs.sums(n, kv, k)
        else:  # each step as long as the slowest rank's
            durs = None
            for (r, n, kv, _, _), dt in zip(formed, shift, strict=True):
                s, t = r.runs.sums(n, kv, k)
                d = s[t + 1 : t + k + 1] - s[t : t + k]  # the steps (np.diff, without its overhead)
                if dt:
                    d += dt
                    np.maximum(d, 1, out=d)
                durs = d if durs is None else np.maximum(durs, d, out=durs)
            sums, t0 = np.zeros(k + 1, dtype=np.int64), 0
            assert durs is not None
            np.cumsum(durs, out=sums[1:])
        for r in self._members:
            r._install(now, sums, t0, k)
        self._schedule(self._members[0]._end(k))

    def _moe_shift(self, formed: list[Formed]) -> list[int]:
        """What each rank's own step price is off by in its MoE layers, in us.

        A rank's price has the MoE ops of every rank carrying its tokens; the replica's run
        once over all the ranks' tokens (each rank's dispatch and combine wait for the others):
        the ops at the ranks' mean tokens, where an idle rank counts none (its dummy batch).
        So the replica's step is ``max(own - MoE(own tokens)) + MoE(mean tokens)``, rank by
        rank in its own phase (prefill or decode-only). Zero for a model without MoE tables
        (:meth:`dynosim.perf.aic.step_time.AicStepTime.moe_us`).
        """
        moe = self._moe
        if moe is None:
            return [0] * len(formed)
        own = []
        for r, n, _, _, _ in formed:  # a request whose KV came by transfer decodes here
            _, chunks, remote = _split(r)
            own.append((float(chunks), float(n + remote)))
        size = len(self.ranks)
        mean = moe(sum(p for p, _ in own) / size, sum(n for _, n in own) / size)
        return [math.floor(mean - moe(p, n) + 0.5) for p, n in own]

    def _tally(self, formed: list[Formed]) -> tuple[list[int], list[int]]:
        """Each rank's context and generation requests scheduled, as TensorRT-LLM counts them.

        A request whose KV came from a prefill worker is a generation request (see
        :class:`~dynosim.engine.policies.VllmWorker`); a rank with no step runs a dummy one.
        """
        contexts, generation = [0] * len(self.ranks), [1] * len(self.ranks)
        for r, n, _, _, _ in formed:
            i = self._index[r]
            contexts[i], _, remote = _split(r)
            generation[i] = n + remote
        return contexts, generation


def _split(r: EngineWorker) -> tuple[int, int, int]:
    """(context requests, their chunk tokens, requests whose KV came by transfer) of its step."""
    contexts = chunks = remote = 0
    for rr, c in r._step_prefill:
        if rr.remote:
            remote += 1
        else:
            contexts += 1
            chunks += c
    return contexts, chunks, remote


Formed = tuple["EngineWorker", int, int, list[tuple[int, int]], bool]
"""A rank's step: (rank, decoding requests, their KV tokens, prefill shapes, step once)."""


def _without_contexts(
    r: EngineWorker, n: int, kv: int, shapes: list[tuple[int, int]], single: bool
) -> Formed:
    """The rank's step with its context requests held (admitted, computing nothing)."""
    r._step_prefill = [(rr, c) for rr, c in r._step_prefill if rr.remote]
    return r, n, kv, [(c, rr.computed) for rr, c in r._step_prefill], single
