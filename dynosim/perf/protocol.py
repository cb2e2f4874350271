"""The one protocol every step-time model implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt


class StepTimeModel(Protocol):
    """Duration of one engine iteration (one forward pass of a continuous batch).

    Times are integer microseconds (>= 1) so that simulated time sums exactly.

    Invariants every implementation keeps (checked by the conformance suite):
      * deterministic: the same shape always gives the same duration;
      * monotone: more prefill tokens, more decode requests (at the same KV length each) or
        longer KV never make a step faster (the same KV split among more requests may be
        faster: AIConfigurator measures one long request's decode attention as poorly parallel);
      * ``decode_run_us(n, kv, k)[j] == step_us((), n, kv + j * n)`` for every j < k, bit for
        bit, so that fast-forwarding many decode steps equals stepping them one at a time.
    """

    def step_us(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> int:
        """Duration of one mixed step.

        Args:
            prefill: One ``(chunk_tokens, context_tokens)`` pair per request prefilling in this
                step: the tokens computed now, and the tokens already in its KV cache (a cached
                prefix plus earlier chunks).
            n_decode: Requests generating one token each in this step.
            decode_kv_tokens: Sum over those requests of the KV length each attends to.

        Returns:
            The step's duration in microseconds, at least 1.
        """
        ...

    def decode_run_us(
        self, n_decode: int, decode_kv_tokens: int, n_steps: int
    ) -> npt.NDArray[np.int64]:
        """Durations of ``n_steps`` consecutive decode-only steps of the same ``n_decode`` requests.

        Step j attends ``decode_kv_tokens + j * n_decode`` KV tokens in all.
        """
        ...
