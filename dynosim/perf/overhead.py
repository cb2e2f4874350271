"""Per-backend framework overhead of one engine step (scheduling, sampling, Python, launches).

AIConfigurator's database holds kernel time only; a real engine also spends host time on every
iteration. We model it as ``base_us + per_request_us * requests + per_token_us * tokens`` in
the step, and allow a per-phase correction of the kernel time (``decode`` multiplies the kernel
time of a step's decode requests, ``prefill`` what its prefill chunks add to it).

The constants come from a calibration profile (:mod:`dynosim.perf.calibration`): the
deployment's ``calibration: PROFILE.yaml``, or the shipped ``dynosim/perf/profiles/default.yaml``
which ``dynosim calibrate`` fitted on the calibration groups of AIConfigurator's
``silicon_sample.csv`` (the command that regenerates it is in the file's header).
``framework_overhead_us`` in a deployment overrides the step overhead with a constant.

:class:`CalibratedStepTime` wraps a step-time model whose own overhead is ``base + per_request``
and adds the per-token term and the kernel factors; :func:`calibrated` applies it only when the
profile needs it, so a profile without those terms prices steps exactly as the plain model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dynosim.config import DeploymentConfig
from dynosim.perf.calibration import CalibrationProfile, StepCalibration, load_profile
from dynosim.perf.catalog import model_spec

if TYPE_CHECKING:
    from dynosim.perf.protocol import StepTimeModel


_MEMO_MAX = 1 << 16
"""Entries of :class:`CalibratedStepTime`'s memo of one-chunk prefill steps before it restarts."""


@dataclass(frozen=True, slots=True)
class FrameworkOverhead:
    """Host-side time added to every engine step.

    Attributes:
        base_us: Constant per step.
        per_request_us: Added per request in the step (prefilling or decoding).
        per_token_us: Added per token computed in the step (applied by
            :class:`CalibratedStepTime`; the kernel models add ``us(n_requests)`` only).
    """

    base_us: float
    per_request_us: float = 0.0
    per_token_us: float = 0.0

    def us(self, n_requests: int, n_tokens: int = 0) -> float:
        """Overhead of one step holding ``n_requests`` requests and ``n_tokens`` tokens."""
        return self.base_us + self.per_request_us * n_requests + self.per_token_us * n_tokens


NO_OVERHEAD = FrameworkOverhead(0.0, 0.0)


def deployment_profile(config: DeploymentConfig) -> CalibrationProfile:
    """The profile ``config`` uses (its ``calibration`` file, or the shipped default).

    Raises:
        ConfigError: the file is missing or not a valid profile (one line naming it).
    """
    return load_profile(getattr(config, "calibration", None))


def with_calibration(config: DeploymentConfig, base_dir: Path | None = None) -> DeploymentConfig:
    """``config`` with its calibration applied at the edge (idempotent).

    A relative ``calibration`` path that does not exist from the working directory is taken
    relative to ``base_dir`` (the deployment file's folder). The profile is read (so a missing
    or bad file is a one-line ``ConfigError`` here, before any simulation), and a deployment
    that names a profile and has no ``host`` section takes the profile's host cost of its
    backend (with a streaming cost, also the server's default process count that cost was
    fitted with). The shipped default's host costs are not applied to deployments that name no
    profile: they exist only for the backends with calibration rows, and applying them would
    make a study prefer a backend for lacking data (``validate`` uses them).

    Raises:
        ConfigError: the profile file is missing or invalid.
    """
    path = config.calibration
    if path is not None and base_dir is not None:
        p = Path(path)
        if not p.is_absolute() and not p.exists() and (base_dir / p).exists():
            config = replace(config, calibration=str(base_dir / p))
    host = deployment_profile(config).backend(config.backend).host
    named = config.calibration is not None
    if named and config.host is None and max(host.request_us, host.input_token_us,
                                              host.output_token_us) > 0:  # fmt: skip
        config = replace(config, host=host.host_config(config.backend))
    return config


def step_calibration(config: DeploymentConfig) -> StepCalibration:
    """The step calibration of ``config``'s backend; ``framework_overhead_us`` overrides it.

    An override is a constant per step (no per-request or per-token term, kernel factors 1).
    An engine without async scheduling (``engine.async_scheduling: false``) also pays the
    profile's ``synchronous`` terms; a profile's ``per_layer_us`` adds that much per decoder
    layer of the model to every step.
    """
    if config.framework_overhead_us is not None:
        return StepCalibration(base_us=float(config.framework_overhead_us))
    overlapped = config.engine.async_scheduling is not False
    cal = deployment_profile(config).backend(config.backend)
    layers = model_spec(config.model).layers if cal.per_layer_us else 0
    return cal.step_for(config.gpu, overlapped, layers)


def framework_overhead(config: DeploymentConfig) -> FrameworkOverhead:
    """The ``base + per_request`` overhead the kernel models add to every step of ``config``."""
    s = step_calibration(config)
    return FrameworkOverhead(s.base_us, s.per_request_us)


class CalibratedStepTime:
    """A step-time model with a calibrated overhead and per-phase kernel factors.

    ``inner`` prices a step as kernel time plus ``inner_overhead.us(requests)``; this model
    returns ``round(decode * K_d + prefill * (K - K_d) + base + per_request * requests +
    per_token * tokens)``: ``K`` is the step's kernel time and ``K_d`` its decodes' share (0
    without decodes). A step's kernels are not additive: batched with a prefill, decodes share
    its weight reads (dense GEMMs) and its experts (MoE, where a mixed step can cost less than
    its decodes alone), so how the shared part is split decides which way the price can move:

    * ``prefill >= decode``: ``K_d`` is the smaller of the decodes'
      kernel time alone (the step without its prefill chunks) and what they add to the chunks
      alone. The price is then ``decode * K + (prefill - decode) * (K - K_d)`` with ``K -
      K_d`` the larger of the chunks' own time and what they add to the decodes: it cannot
      fall as decodes join. With the decodes' own time as their share it did, for MoE
      (Qwen3-30B-A3B on TRT-LLM's profile: 30.5 ms with one decode, 28.8 ms with 13).
    * ``prefill < decode``: ``K_d`` is the decodes' own time, so the price is ``prefill * K +
      (decode - prefill) * K_d``: it cannot fall as prefill tokens join.

    ``dynosim calibrate`` fits both splits (:mod:`dynosim.validation.calibrate`) and keeps the
    one that explains the rows better.

    The decode-only paths use the same IEEE-754 operations in the same order (fast-forward
    equals stepping bit for bit).
    """

    def __init__(
        self,
        inner: StepTimeModel,
        cal: StepCalibration,
        inner_overhead: FrameworkOverhead,
        floor: StepTimeModel | None = None,
    ) -> None:
        """Wrap ``inner`` (whose own per-step overhead is ``inner_overhead``).

        ``floor`` (no overhead of its own): the calibrated kernel time of a step is never
        below ``floor``'s time of the same step (:func:`dynosim.perf.roofline.physical_floor`:
        kernel factors fitted below 1 cannot make a step beat the GPU's peak).
        """
        self.inner = inner
        self.cal = cal
        self.inner_overhead = inner_overhead
        self.floor = floor
        self._monotone = getattr(inner, "decode_monotone", None)
        self._floor_run = getattr(floor, "decode_run_float", None)
        # A mixed step needs the inner prices of the step, its decodes and its chunks: one pass
        # when the model offers it (AicStepTime.step_parts; a third of a decode pool's run
        # priced the chunk and decode attention twice each).
        self._parts = getattr(inner, "step_parts", None)
        self.overhead = FrameworkOverhead(cal.base_us, cal.per_request_us, cal.per_token_us)
        # The terms of both overheads, for FrameworkOverhead.us written inline on the step paths
        # (the same expression: a call each was a tenth of a step's price).
        o = inner_overhead
        self._inner_terms = (o.base_us, o.per_request_us)  # called without tokens: no token term
        self._terms = (cal.base_us, cal.per_request_us, cal.per_token_us)
        # Prefill-only steps of one request, by (chunk, context): a disaggregated prefill
        # worker's steps, whose first chunks (full budget, context a hit) often repeat.
        self._chunk_us: dict[tuple[int, int], int] = {}

    def step_us(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> int:
        """Duration of one mixed step (see the protocol)."""
        if not n_decode and prefill:
            return self._prefill_us(prefill)
        parts = self._parts if prefill and n_decode > 0 else None
        if parts is not None:
            whole, alone_us, chunks_us = parts(prefill, n_decode, decode_kv_tokens)
        else:
            whole = self.inner.step_us(prefill, n_decode, decode_kv_tokens)
        inner = float(whole)
        floor = self.floor
        if not prefill:
            kernel = self.cal.decode * (inner - self.inner_overhead.us(n_decode))
            if floor is not None:
                kernel = max(kernel, float(floor.step_us((), n_decode, decode_kv_tokens)))
            total = kernel + self.overhead.us(n_decode, n_decode)
            return max(1, math.floor(total + 0.5))
        m = len(prefill)
        n_requests = m + n_decode
        tokens = n_decode
        for chunk, _ in prefill:  # a loop: no generator per step
            tokens += chunk
        ib, ir = self._inner_terms  # self.inner_overhead.us(x) is ib + ir * x
        kernel = inner - (ib + ir * n_requests)
        decode = 0.0
        cal = self.cal
        if n_decode > 0:
            if parts is None:
                alone_us = self.inner.step_us((), n_decode, decode_kv_tokens)
            decode = min(kernel, float(alone_us) - (ib + ir * n_decode))
            if cal.prefill >= cal.decode:
                if parts is None:
                    chunks_us = self.inner.step_us(prefill, 0, 0)
                chunks = float(chunks_us)
                added = kernel - (chunks - (ib + ir * m))
                decode = max(0.0, min(added, decode))
        priced = cal.decode * decode + cal.prefill * (kernel - decode)
        if floor is not None:
            priced = max(priced, float(floor.step_us(prefill, n_decode, decode_kv_tokens)))
        b, r, t = self._terms  # self.overhead.us(n_requests, tokens)
        total = priced + (b + r * n_requests + t * tokens)
        us = math.floor(total + 0.5)
        return us if us > 1 else 1

    def moe_us(self, prefill_tokens: float, n_decode: float) -> float:
        """The inner model's MoE share (``AicStepTime.moe_us``), priced by the phase's factor."""
        inner = getattr(self.inner, "moe_us", None)
        if inner is None:
            return 0.0
        factor = self.cal.prefill if prefill_tokens > 0 else self.cal.decode
        return factor * float(inner(prefill_tokens, n_decode))

    def _prefill_us(self, prefill: Sequence[tuple[int, int]]) -> int:
        """:meth:`step_us` of a step with chunks only (no decodes: no decode share, ``K_d = 0``).

        The mixed path with ``decode = 0.0``, its zero terms left out (the same integers); a
        one-chunk step is a pure function of its chunk, memoised.
        """
        one = len(prefill) == 1
        if one:
            known = self._chunk_us.get(prefill[0])
            if known is not None:
                return known
        m = len(prefill)
        tokens = 0
        for chunk, _ in prefill:  # a loop: no generator per step
            tokens += chunk
        ib, ir = self._inner_terms  # self.inner_overhead.us(m)
        kernel = float(self.inner.step_us(prefill, 0, 0)) - (ib + ir * m)
        priced = self.cal.prefill * kernel  # the mixed path's priced with decode = 0.0
        if self.floor is not None:
            priced = max(priced, float(self.floor.step_us(prefill, 0, 0)))
        b, r, t = self._terms  # self.overhead.us(m, tokens)
        us = math.floor(priced + (b + r * m + t * tokens) + 0.5)
        us = us if us > 1 else 1
        if one:
            if len(self._chunk_us) >= _MEMO_MAX:
                self._chunk_us.clear()
            self._chunk_us[prefill[0]] = us
        return us

    def _floor_float(self, n: int, kv: int, k: int) -> npt.NDArray[np.float64]:
        """The floor's decode run as floats (its own float path when it has one)."""
        if self._floor_run is not None:
            out: npt.NDArray[np.float64] = self._floor_run(n, kv, k)
            return out
        assert self.floor is not None
        return self.floor.decode_run_us(n, kv, k).astype(np.float64)

    def _under_floor(self, n: int, kv: int, k: int) -> bool:
        """Whether every step of a decode run is priced at the floor (its kernel time below it).

        Decided from the two ends when the kernel model's decode step never shrinks as the KV
        grows (:meth:`~dynosim.perf.aic.AicStepTime.decode_monotone`): the run's longest kernel
        time, at its last step, against the floor's shortest, at its first, with one rounding
        unit of margin (a rounded step of a non-decreasing curve can exceed a later one by at
        most 1 us). Otherwise False: the run is priced step by step.
        """
        floor, monotone = self.floor, self._monotone
        if floor is None or monotone is None or not monotone(n):
            return False
        last = kv + n * (k - 1)
        top = self.cal.decode * (float(self.inner.step_us((), n, last)) - self.inner_overhead.us(n))
        return top + self.cal.decode <= float(floor.step_us((), n, kv))

    def decode_run_us(
        self, n_decode: int, decode_kv_tokens: int, n_steps: int
    ) -> npt.NDArray[np.int64]:
        """Durations of ``n_steps`` decode-only steps (see the protocol)."""
        own = self.inner_overhead.us(n_decode)
        add = self.overhead.us(n_decode, n_decode)
        floor = self.floor
        if floor is not None and n_steps > 0 and self._under_floor(n_decode, decode_kv_tokens,
                                                                   n_steps):  # fmt: skip
            kernel = self._floor_float(n_decode, decode_kv_tokens, n_steps)
        else:
            inner = self.inner.decode_run_us(n_decode, decode_kv_tokens, n_steps)
            kernel = self.cal.decode * (inner.astype(np.float64) - own)
            if floor is not None and n_steps > 0:
                # The floor grows with the KV length (its last step is its largest): a run
                # whose every step is above that needs no floor array (the max is a no-op).
                last = decode_kv_tokens + n_decode * (n_steps - 1)
                if float(kernel.min()) < float(floor.step_us((), n_decode, last)):
                    low = self._floor_float(n_decode, decode_kv_tokens, n_steps)
                    kernel = np.maximum(kernel, low)
        kernel += add  # in place: every branch above made a new array
        kernel += 0.5
        out = kernel.astype(np.int64)  # floor for x >= 0; the clamp covers the rest
        np.maximum(out, 1, out=out)
        return out


def calibrated(
    model: StepTimeModel, config: DeploymentConfig, floor: StepTimeModel | None = None
) -> StepTimeModel:
    """``model`` with ``config``'s step calibration (``model`` itself when it needs none).

    ``floor``: the physical floor of the kernel time (:class:`CalibratedStepTime`); the caller
    passes one when the profile's ``roofline_floor`` asks for it
    (:func:`dynosim.perf.factory.step_time_model`).
    """
    cal = step_calibration(config)
    if cal.kernel_exact and floor is None:
        return model
    return CalibratedStepTime(model, cal, framework_overhead(config), floor)
