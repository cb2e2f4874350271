"""A linear step-time model: simple, exact and fast; for tests and what-if studies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearStepTime:
    """``base + per_token * tokens + per_ctx * attended tokens + per_seq * requests`` in µs.

    Prefill attention is priced per chunk as ``chunk * (context + chunk / 2)`` token pairs.
    """

    base_us: float = 5000.0
    per_token_us: float = 0.15
    per_pair_us: float = 0.0
    per_kv_token_us: float = 0.002
    per_seq_us: float = 20.0

    def step_us(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> int:
        """Duration of one step in µs."""
        if not prefill:
            return int(self.decode_run_us(n_decode, decode_kv_tokens, 1)[0])
        tokens = n_decode + sum(c for c, _ in prefill)
        pairs = sum(c * (ctx + c / 2) for c, ctx in prefill)
        t = (
            self.base_us
            + self.per_token_us * tokens
            + self.per_pair_us * pairs
            + self.per_kv_token_us * decode_kv_tokens
            + self.per_seq_us * (n_decode + len(prefill))
        )
        return max(1, round(t))

    def decode_run_us(
        self, n_decode: int, decode_kv_tokens: int, n_steps: int
    ) -> npt.NDArray[np.int64]:
        """Durations of consecutive decode-only steps in µs."""
        kv = decode_kv_tokens + n_decode * np.arange(n_steps, dtype=np.int64)
        fixed = self.base_us + (self.per_token_us + self.per_seq_us) * n_decode
        t = fixed + self.per_kv_token_us * kv
        out: npt.NDArray[np.int64] = np.maximum(1, np.rint(t)).astype(np.int64)
        return out
