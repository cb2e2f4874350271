"""Speculative decoding: tokens per verify step and the cost of a verify step.

Each decode step of a speculating engine drafts ``k`` tokens (MTP or EAGLE heads, or a small
draft model) and verifies them in one forward pass of the target model over ``k + 1`` tokens
per request; the accepted prefix plus one token of the target's own comes out. With
``acceptance`` ``[p1, ..., pk]``, ``p_i`` the probability that draft token ``i`` is accepted
given that the ones before it were (vLLM's per-position acceptance rate), a step yields
``1 + sum_i prod_{j<=i} p_j`` tokens on average (a single rate ``a`` is ``p_i = a``).

How the simulator runs it: a request's output of ``O`` tokens takes ``V`` verify steps, the
first token coming from its prefill as always: ``V = 1 + ceil((O - 1) / E)`` with ``E`` the
expected tokens per step (``sampling: expected``), or the number of seeded draws of the
per-step token count that reach ``O`` (``sampling: sampled``, one stream per request). The
engine schedules those ``V`` steps as it schedules plain decoding (so batching, chunked
prefill, preemption and fast-forward are unchanged and exact), and the request holds from
admission the KV blocks of the tokens beyond one per step (:func:`extra_blocks`), so that its
KV at the end is that of ``O`` tokens. Approximations: the KV a step attends grows by one
token per request per step instead of ``E`` (the prompt part is exact), and a recompute after
preemption recomputes one token per step done.

Step cost (:class:`SpeculativeStepTime`): the verify pass is the target's step with every
decoding request counted ``k + 1`` times (GEMM tokens, LM-head rows and attention queries over
the request's KV all scale with ``k + 1``), plus ``k`` draft passes of ``draft_fraction`` of
a target decode step each: the weights a draft token reads relative to the target's
(:func:`draft_fraction`; decode is bound by weight reads). With ``k = 0`` none of this
applies: plain decoding, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dynosim.perf.protocol import StepTimeModel

if TYPE_CHECKING:
    from dynosim.config import SpeculativeConfig
    from dynosim.perf.model_spec import ModelSpec


def acceptance_profile(spec: SpeculativeConfig) -> tuple[float, ...]:
    """The per-position acceptance probabilities, one per draft token."""
    a = spec.acceptance
    assert a is not None  # SpeculativeConfig fills in the default
    if isinstance(a, int | float):
        return (float(a),) * spec.num_speculative_tokens
    return tuple(float(x) for x in a)


def expected_tokens_per_step(spec: SpeculativeConfig) -> float:
    """``1 + sum_i prod_{j<=i} p_j``: tokens a verify step yields on average."""
    total, run = 1.0, 1.0
    for p in acceptance_profile(spec):
        run *= p
        total += run
    return total


def verify_steps(
    outputs: npt.NDArray[np.int64], spec: SpeculativeConfig, seed: int
) -> npt.NDArray[np.int64]:
    """Verify steps each request takes for its output (its first token counts as one).

    ``expected``: ``1 + ceil((O - 1) / E)``. ``sampled``: per request, draws of the tokens a
    step yields (1 + the accepted draft prefix) until they reach ``O - 1``; request ``i`` uses
    the ``i``-th stream of ``seed``, so a request's steps do not depend on the others.
    """
    out = np.asarray(outputs, dtype=np.int64)
    rest = np.maximum(out - 1, 0)
    if spec.num_speculative_tokens == 0:
        return out.copy()
    if spec.sampling == "expected":
        e = expected_tokens_per_step(spec)
        return 1 + np.ceil(rest / e).astype(np.int64)
    probs = np.asarray(acceptance_profile(spec))
    steps = np.empty(out.size, dtype=np.int64)
    streams = np.random.SeedSequence(seed).spawn(out.size)
    for i, need in enumerate(rest.tolist()):
        # A step yields at least one token, so ``need`` steps always suffice: draw them all.
        accept = np.random.default_rng(streams[i]).random((need, probs.size)) < probs
        # tokens per step: 1 + the leading run of accepted draft tokens
        reached = np.cumsum(1 + np.cumprod(accept, axis=1).sum(axis=1))
        steps[i] = 1 + int(np.searchsorted(reached, need)) + (1 if need else 0)
    return steps


def extra_blocks(
    inputs: npt.NDArray[np.int64],
    outputs: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
    block_size: int,
) -> npt.NDArray[np.int64]:
    """KV blocks of ``O`` output tokens beyond those of ``V`` (one token per step)."""
    full = -(-(inputs + outputs - 1) // block_size)
    paged = -(-(inputs + steps - 1) // block_size)
    return np.maximum(full - paged, 0).astype(np.int64)


def draft_fraction(spec: SpeculativeConfig, target: ModelSpec, draft: ModelSpec | None) -> float:
    """Cost of one draft token relative to a target decode step (weights read per token).

    MTP and EAGLE heads are one decoder layer plus the LM head (DeepSeek-V3's MTP module, an
    EAGLE head); a draft model reads all its weights.
    """
    if spec.method == "draft":
        assert draft is not None
        return draft.active_params / target.active_params
    lm_head = target.vocab * target.hidden
    layer = (target.active_params - lm_head) / target.layers
    return (layer + lm_head) / target.active_params


class SpeculativeStepTime:
    """:class:`~dynosim.perf.protocol.StepTimeModel` of a speculating engine (see module)."""

    def __init__(self, inner: StepTimeModel, k: int, draft_fraction: float) -> None:
        self.inner = inner
        self.m = k + 1
        self.draft = k * draft_fraction

    def _draft_us(self, base_us: int) -> int:
        return math.floor(self.draft * base_us + 0.5)

    def step_us(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> int:
        """A verify step (and the drafting) of ``n_decode`` requests, with ``prefill``."""
        m = self.m
        verify = self.inner.step_us(prefill, m * n_decode, m * decode_kv_tokens)
        if n_decode <= 0:
            return verify
        return verify + self._draft_us(self.inner.step_us((), n_decode, decode_kv_tokens))

    def moe_us(self, prefill_tokens: float, n_decode: float) -> float:
        """The inner model's MoE share of the verify step (each decode verifies ``k + 1``)."""
        inner = getattr(self.inner, "moe_us", None)
        return 0.0 if inner is None else float(inner(prefill_tokens, self.m * n_decode))

    def decode_run_us(
        self, n_decode: int, decode_kv_tokens: int, n_steps: int
    ) -> npt.NDArray[np.int64]:
        """Durations of ``n_steps`` consecutive verify steps.

        The protocol's invariant holds: the same integers as :meth:`step_us`, element by element.
        """
        m = self.m
        verify = self.inner.decode_run_us(m * n_decode, m * decode_kv_tokens, n_steps)
        if n_decode <= 0:
            return verify
        base = self.inner.decode_run_us(n_decode, decode_kv_tokens, n_steps)
        draft = np.floor(self.draft * base + 0.5).astype(np.int64)
        out: npt.NDArray[np.int64] = verify + draft
        return out
