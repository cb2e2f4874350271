"""Decode-only step durations, memoised by shape in aligned chunks with their running sums.

Why: a fast-forwarded segment needs the duration of each of its decode steps (its end is their
sum; a sync or a cut bisects their running sums), and pricing every segment afresh was about a
third of a Mooncake run (13k segments of ~230 steps, each ~25 numpy calls on small arrays).
The duration of a decode-only step is a pure function of its shape ``(n, kv)`` (the protocol:
``decode_run_us(n, kv, k)[j] == step_us((), n, kv + j * n)``), and segments revisit the same
shapes: few requests decode at once, and all the workers of a pool share one table. So step
``m`` of the arithmetic progression ``kv = r + n * m`` (``0 <= r < n``) is priced once, in a
chunk of ``chunk_steps(n)`` steps starting at a multiple of that length, kept as running sums
(``P[t]``: the first ``t`` steps of the chunk). Exact by construction: every duration is the
model's own, and sums of integers do not depend on their grouping. Mooncake, 8 workers: 525
chunks priced instead of 13,374 segments (537k step prices instead of 3.07M).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from dynosim.perf.protocol import StepTimeModel

I64 = npt.NDArray[np.int64]

NO_SUMS: I64 = np.zeros(1, dtype=np.int64)
"""The running sums of no segment (a worker's before its first)."""

_MAX_STEPS = 1 << 21
"""Step prices kept (16 MiB) before the memo starts over (a long run visits ever new shapes)."""


def chunk_steps(n: int) -> int:
    """Steps per chunk for ``n`` decoding requests: 1,024 for a few, down to 64 for many.

    With many requests a shape's progression (one of ``n`` residues) is revisited less often
    and segments are shorter (more arrivals and finishes), so a long chunk would mostly price
    steps nobody runs.
    """
    if n <= 4:
        return 1024
    return max(64, 1 << ((4096 // n).bit_length() - 1))


class DecodeRuns:
    """Running sums of decode-only step durations of one step-time model, by chunk."""

    __slots__ = ("_chunks", "_steps", "timing")

    def __init__(self, timing: StepTimeModel) -> None:
        self.timing = timing
        self._chunks: dict[tuple[int, int, int], I64] = {}
        self._steps = 0

    def _chunk(self, n: int, r: int, q: int, c: int) -> I64:
        """Running sums of the chunk ``q`` (``c`` steps) of progression ``r + n * m``."""
        key = (n, r, q)
        sums = self._chunks.get(key)
        if sums is None:
            if self._steps >= _MAX_STEPS:
                self._chunks.clear()
                self._steps = 0
            durs = self.timing.decode_run_us(n, r + n * c * q, c)
            sums = np.zeros(c + 1, dtype=np.int64)
            np.cumsum(durs, out=sums[1:])
            self._chunks[key] = sums
            self._steps += c
        return sums

    def sums(self, n: int, kv: int, k: int) -> tuple[I64, int]:
        """``(P, t)``: the first ``j <= k`` steps from ``kv`` take ``P[t + j] - P[t]`` us."""
        m, r = divmod(kv, n)
        c = chunk_steps(n)
        q, t = divmod(m, c)
        sums = self._chunk(n, r, q, c)
        last = (m + k - 1) // c
        if last == q:
            return sums, t
        # The run crosses chunks (a quarter of Mooncake's segments, one in seven of the worker
        # sweep's): the sums of its own k steps only, in one new array, each later chunk
        # shifted by the total of those before it. The same integers as joining the whole
        # chunks, without writing them: a worker decoding a few requests has chunks of 1,024
        # steps, and copying and shifting whole ones wrote ~24 KiB of fresh memory for a
        # segment of ~130 steps.
        out = np.empty(k + 1, dtype=np.int64)
        head = c + 1 - t  # this chunk's sums from step t on
        out[:head] = sums[t:]
        off, at = int(sums[c]), head
        for p in range(q + 1, last + 1):
            nxt = self._chunk(n, r, p, c)
            take = min(c, k + 1 - at)
            np.add(nxt[1 : take + 1], off, out=out[at : at + take])
            off, at = off + int(nxt[c]), at + take
        return out, 0
