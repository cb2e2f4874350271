"""The step-time model that interpolates AIConfigurator tables with linear arithmetic only.

A step's prefill attention is ``F + sum_i (prefill_us[c_i, p_i] - F)`` with
``F = prefill_us[1, 0]``, the kernel-launch floor paid once per step (this tracks
AIConfigurator's batched attention within ~20%, where summing per request overcounts ~3x).
A step's decode attention of ``n`` requests attending ``K`` KV tokens in all is
``decode_us[n, K / n]``: AIConfigurator's uniform batch of ``n`` requests at the mean context
(its own coordinates; the table is monotone in ``n`` at equal context and in the context).
Decode-only steps use ``dec_nonattn_us`` when the model has it, else ``nonattn_us``. Values
beyond a grid's end extrapolate its last segment linearly. AIConfigurator reports kernel time
only; the backend's framework overhead is added per step.
"""

from __future__ import annotations

import math
import warnings
from bisect import bisect_right
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dynosim.config import DeploymentConfig
from dynosim.perf.aic.build import F64
from dynosim.perf.aic.cache import EstimatedTimingWarning, load_tables
from dynosim.perf.aic.key import resolve_key
from dynosim.perf.overhead import FrameworkOverhead, framework_overhead

_SCALAR_RUN = 20  # decode runs up to this many steps are priced in Python floats (faster)


def _seg(grid: Sequence[float], x: float) -> tuple[int, float]:
    """Segment index and (possibly > 1, extrapolating) weight of ``x`` on ``grid``."""
    i = bisect_right(grid, x) - 1
    i = min(max(i, 0), len(grid) - 2)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def _lerp(grid: Sequence[float], vals: Sequence[float], x: float) -> float:
    i, w = _seg(grid, x)
    return vals[i] + w * (vals[i + 1] - vals[i])


class AicStepTime:
    """:class:`~dynosim.perf.protocol.StepTimeModel` interpolating AIConfigurator tables."""

    def __init__(self, tables: dict[str, F64], overhead: FrameworkOverhead) -> None:
        """Wrap precomputed ``tables`` (see :func:`.build_tables`) and a framework overhead."""
        self.overhead = overhead
        t = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in tables.items()}
        self._tok: list[float] = t["tok_grid"].tolist()
        self._nonattn: list[float] = t["nonattn_us"].tolist()
        self._req: list[float] = t["req_grid"].tolist()
        self._logits: list[float] = t["logits_us"].tolist()
        self._chunk: list[float] = t["chunk_grid"].tolist()
        self._ctx: list[float] = t["ctx_grid"].tolist()
        self._prefill: list[list[float]] = t["prefill_us"].tolist()
        self._floor: float = self._prefill[0][0]
        # Widths of the grids' segments and the prefill rows' steps along the context, as the
        # lerps subtract them (the same differences, taken once: the same bits).
        self._tok_w: list[float] = np.diff(t["tok_grid"]).tolist()
        self._nonattn_d: list[float] = np.diff(t["nonattn_us"]).tolist()
        self._chunk_w: list[float] = np.diff(t["chunk_grid"]).tolist()
        self._ctx_w: list[float] = np.diff(t["ctx_grid"]).tolist()
        self._prefill_d: list[list[float]] = np.diff(t["prefill_us"], axis=1).tolist()
        self._dn: list[float] = t["dec_n_grid"].tolist()
        # Python floats: the scalar and the vectorised decode paths apply the same IEEE-754
        # operations in the same order, hence give the same bits (no transcendentals, no FMA).
        sg, dec = t["dec_s_grid"], t["decode_us"]
        self._sg_l: list[float] = sg.tolist()
        self._sw_l: list[float] = np.diff(sg).tolist()
        self._dec_l: list[list[float]] = dec.tolist()
        self._ddec_l: list[list[float]] = np.diff(dec, axis=1).tolist()
        self._monotone: dict[int, bool] = {}
        self._dec_nonattn: list[float] = t["dec_nonattn_us"].tolist()
        self._moe: list[float] = t["moe_us"].tolist() if "moe_us" in t else []
        self._dec_moe: list[float] = t["dec_moe_us"].tolist() if "dec_moe_us" in t else []
        self._per_n: dict[int, tuple[int, float, float]] = {}
        self._per_r: dict[int, tuple[float, float]] = {}

    @classmethod
    def from_config(cls, config: DeploymentConfig) -> AicStepTime:
        """Build (or load cached) tables for ``config``.

        Raises:
            ConfigError: AIConfigurator lacks the model, GPU, backend or dtype.

        Warns:
            EstimatedTimingWarning: AIConfigurator had no measurements for some ops at this
                shape, and they are its estimates (``aic_database_mode: hybrid``).
        """
        key = resolve_key(config)
        tables, note = load_tables(key)
        if note:
            warnings.warn(EstimatedTimingWarning(key, note), stacklevel=2)
        return cls(tables, framework_overhead(config))

    def _const_us(self, n_tokens: int, n_requests: int) -> float:
        """Attention-free part of a step: other ops, LM head and framework overhead."""
        per_request = self._per_r.get(n_requests)
        if per_request is None:
            logits = _lerp(self._req, self._logits, float(n_requests))
            per_request = (logits, self.overhead.us(n_requests))
            self._per_r[n_requests] = per_request
        # _lerp(self._tok, self._nonattn, x) inline, with the segment widths taken once
        grid, x = self._tok, float(n_tokens)
        i = bisect_right(grid, x) - 1
        top = len(grid) - 2
        i = (i if i < top else top) if i > 0 else 0
        other = self._nonattn[i] + (x - grid[i]) / self._tok_w[i] * self._nonattn_d[i]
        return other + per_request[0] + per_request[1]

    def _chunks_us(self, prefill: Sequence[tuple[int, int]]) -> tuple[int, float]:
        """Tokens of the chunks ``(chunk, context)`` and their attention, ``F + sum(p - F)``.

        Each chunk's ``p`` is a bilinear lerp of the prefill table (chunk, then context),
        inline: a step prices its chunks in one call.
        """
        fl = self._floor
        cg, cw, xg, xw = self._chunk, self._chunk_w, self._ctx, self._ctx_w
        ctop, xtop = len(cg) - 2, len(xg) - 2
        rows, steps = self._prefill, self._prefill_d
        tokens = 0
        attn = fl
        for chunk, context in prefill:
            tokens += chunk
            x = float(chunk if chunk > 1 else 1)
            i = bisect_right(cg, x) - 1
            i = (i if i < ctop else ctop) if i > 0 else 0
            wc = (x - cg[i]) / cw[i]
            x = float(context if context > 0 else 0)
            j = bisect_right(xg, x) - 1
            j = (j if j < xtop else xtop) if j > 0 else 0
            wp = (x - xg[j]) / xw[j]
            a = rows[i][j] + wp * steps[i][j]
            b = rows[i + 1][j] + wp * steps[i + 1][j]
            attn += a + wc * (b - a) - fl
        return tokens, attn

    def decode_monotone(self, n: int) -> bool:
        """Whether a decode step of ``n`` requests never gets shorter as the KV grows.

        The step is piecewise linear in the KV length (each cell of the grid of context per
        request a lerp of two batch rows, continuous across cells): it is non-decreasing when
        every cell's slope, ``(1 - wn) da + wn db``, is at least 0. Cached per ``n``.
        """
        known = self._monotone.get(n)
        if known is None:
            i, wn, _ = self._decode_row(n)
            da, db = self._ddec_l[i], self._ddec_l[i + 1]
            known = all((1.0 - wn) * a + wn * b >= 0.0 for a, b in zip(da, db, strict=True))
            self._monotone[n] = known
        return known

    def _decode_row(self, n: int) -> tuple[int, float, float]:
        """Row index and weight on the batch grid, and the attention-free time, for ``n``."""
        row = self._per_n.get(n)
        if row is None:
            i, wn = _seg(self._dn, float(n))
            if self._dec_nonattn:  # the generation op list differs from the context one
                self._const_us(n, n)  # caches the LM head and overhead of n requests
                logits, overhead = self._per_r[n]
                const = _lerp(self._req, self._dec_nonattn, float(n)) + logits + overhead
            else:
                const = self._const_us(n, n)
            row = (i, wn, const)
            self._per_n[n] = row
        return row

    def _s_cell(self, s: float) -> int:
        """Segment of the grid of context per request that prices a context of ``s``."""
        j = bisect_right(self._sg_l, s) - 1
        top = len(self._sg_l) - 2
        return (j if j < top else top) if j > 0 else 0

    def _decode_cell_us(self, n: int, j: int, x: F64) -> None:
        """Decode step times (before rounding) of ``n`` requests, in place of the contexts ``x``.

        ``x`` holds contexts per request (total KV / ``n``) of cell ``j``. The same IEEE-754
        operations, in the same order, as :meth:`_decode_attn_scalar_us` plus the
        attention-free time, element by element (scalars broadcast, no FMA; ``a + d`` is
        ``d + a``, as IEEE addition commutes); in place, since on arrays of a few hundred steps
        numpy's cost is per call and allocation.
        """
        i, wn, const = self._decode_row(n)
        x -= self._sg_l[j]
        x /= self._sw_l[j]  # wk
        a = x * self._ddec_l[i][j]
        a += self._dec_l[i][j]
        x *= self._ddec_l[i + 1][j]
        x += self._dec_l[i + 1][j]  # b
        x -= a
        x *= wn
        x += a
        x += const

    def _decode_run_scalar_us(self, n: int, kv: range) -> list[int]:
        """Rounded decode step times for the KV lengths ``kv`` (increasing), in Python floats.

        Element by element the operations of :meth:`step_us` for a decode-only step.
        """
        if not kv:
            return []
        i, wn, const = self._decode_row(n)
        sg, sw = self._sg_l, self._sw_l
        a0, da, b0, db = self._dec_l[i], self._ddec_l[i], self._dec_l[i + 1], self._ddec_l[i + 1]
        top = len(sg) - 2
        j = self._s_cell(float(kv[0]) / n)
        nxt = sg[j + 1] if j < top else math.inf
        out: list[int] = []
        for total in kv:
            x = float(total) / n
            while x >= nxt:
                j += 1
                nxt = sg[j + 1] if j < top else math.inf
            wk = (x - sg[j]) / sw[j]
            a = a0[j] + wk * da[j]
            b = b0[j] + wk * db[j]
            d = math.floor(a + wn * (b - a) + const + 0.5)
            out.append(d if d > 1 else 1)
        return out

    def _decode_attn_scalar_us(self, i: int, wn: float, n: int, kv: float) -> float:
        """Decode attention of ``n`` requests attending ``kv`` KV tokens in all, ``kv / n`` each.

        ``i``, ``wn``: the request-count cell of ``n`` and its weight (:meth:`_decode_row`).
        """
        x = kv / n
        j = self._s_cell(x)
        wk = (x - self._sg_l[j]) / self._sw_l[j]
        a = self._dec_l[i][j] + wk * self._ddec_l[i][j]
        b = self._dec_l[i + 1][j] + wk * self._ddec_l[i + 1][j]
        return a + wn * (b - a)

    def step_us(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> int:
        """Duration of one mixed step (see the protocol)."""
        if not prefill:
            if n_decode <= 0:
                return max(1, math.floor(self.overhead.us(0) + 0.5))
            # Same operations, in the same order, as decode_run_us (checked bit for bit by the
            # conformance suite); Python floats are ~5x faster than numpy on one element.
            i, wn, const = self._decode_row(n_decode)
            total = self._decode_attn_scalar_us(i, wn, n_decode, float(decode_kv_tokens)) + const
            return max(1, math.floor(total + 0.5))
        tokens, attn = self._chunks_us(prefill)
        tokens += n_decode
        if n_decode > 0:
            i, wn, _ = self._decode_row(n_decode)
            attn += self._decode_attn_scalar_us(i, wn, n_decode, float(decode_kv_tokens))
        total = self._const_us(tokens if tokens > 1 else 1, len(prefill) + n_decode) + attn
        return max(1, math.floor(total + 0.5))

    def moe_us(self, prefill_tokens: float, n_decode: float) -> float:
        """The MoE ops' share of a step of a rank with attention DP (0 without the tables).

        AIConfigurator prices them for every rank carrying as many tokens as this one
        (``x x attention_dp``); the ranks of a replica that step together call it with their
        mean tokens to price the experts of all their tokens
        (:class:`~dynosim.engine.lockstep.LockstepGroup`). Tokens below one count as one (a
        rank with nothing runs a dummy request). A decode-only step reads the generation ops.
        """
        x = max(1.0, prefill_tokens + n_decode)
        if prefill_tokens <= 0 and self._dec_moe:
            return _lerp(self._req, self._dec_moe, x)
        return _lerp(self._tok, self._moe, x) if self._moe else 0.0

    def step_parts(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> tuple[int, int, int]:
        """:meth:`step_us` of a mixed step, of its decodes alone and of its chunks alone.

        One pass (each chunk's and the decodes' attention computed once) with the operations
        of the three calls, in their order: the same integers (``prefill`` non-empty,
        ``n_decode > 0``; for :class:`~dynosim.perf.overhead.CalibratedStepTime`).
        """
        tokens, attn = self._chunks_us(prefill)
        i, wn, const = self._decode_row(n_decode)
        d = self._decode_attn_scalar_us(i, wn, n_decode, float(decode_kv_tokens))
        m = len(prefill)
        whole = self._const_us(max(tokens + n_decode, 1), m + n_decode) + (attn + d)
        chunks = self._const_us(max(tokens, 1), m) + attn
        return (max(1, math.floor(whole + 0.5)), max(1, math.floor(d + const + 0.5)),
                max(1, math.floor(chunks + 0.5)))  # fmt: skip

    def decode_run_us(
        self, n_decode: int, decode_kv_tokens: int, n_steps: int
    ) -> npt.NDArray[np.int64]:
        """Durations of ``n_steps`` decode-only steps (see the protocol)."""
        if n_decode <= 0:
            empty = max(1, math.floor(self.overhead.us(0) + 0.5))
            return np.full(n_steps, empty, dtype=np.int64)
        kv = range(decode_kv_tokens, decode_kv_tokens + n_decode * n_steps, n_decode)
        if n_steps <= _SCALAR_RUN:
            return np.array(self._decode_run_scalar_us(n_decode, kv), dtype=np.int64)
        total = np.arange(kv.start, kv.stop, kv.step, dtype=np.float64)  # exact below 2**53
        total /= n_decode  # context per request, as float(kv) / n in the scalar paths
        # Piecewise over the cells of the context grid the run crosses (usually one or two).
        j, last = self._s_cell(float(total[0])), self._s_cell(float(total[-1]))
        if j == last:
            self._decode_cell_us(n_decode, j, total)
        else:
            # Where each cell starts, found before the contexts are overwritten in place.
            cuts = np.searchsorted(total, self._sg_l[j + 1 : last + 1], side="left").tolist()
            for cell, start, stop in zip(
                range(j, last + 1), [0, *cuts], [*cuts, n_steps], strict=True
            ):
                self._decode_cell_us(n_decode, cell, total[start:stop])
        # Truncation is floor for x >= 0, and both give 1 after the clamp for x < 0.
        total += 0.5
        out = total.astype(np.int64)
        np.maximum(out, 1, out=out)
        return out
