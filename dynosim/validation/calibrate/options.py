"""What a calibration fit may move, and the physical range of its kernel factors.

:class:`FitOptions` is what ``dynosim calibrate``'s flags set; :data:`FACTOR_BOUNDS` and
:data:`FACTOR_PRIOR` are what the fit (:mod:`.fit`) keeps the kernel factors in and pulls them
to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynosim.errors import ConfigError

__all__ = ["FACTOR_BOUNDS", "FACTOR_PRIOR", "FitOptions", "check_factor_bounds"]

FACTOR_PRIOR = {3: 0.0, 4: 1.0}
"""What the prior pulls the kernel-factor parameters to: prefill = decode = 1."""
FACTOR_BOUNDS = (0.5, 2.0)
"""The range a fitted kernel factor (prefill and decode, :func:`~.fit.fit_theta`) is kept in.

A kernel factor multiplies AIConfigurator's kernel times, which are measured on the GPU with
the backend's own kernels (its database holds GEMM, attention, MoE and communication timings
per system, backend and version: ``systems/data/<gpu>/<op>/<backend>/``), so physically it is
near 1 and only corrects how those timings compose in a real step: ops summed back to back
that the engine overlaps (communication under compute, programmatic dependent launch), a
kernel version other than the one timed, caches warm or cold. Neither can halve the step: the
decode GEMMs and attention it sums are memory-bound and timed at a large share of the HBM
bandwidth, the prefill GEMMs at a large share of peak FLOPs, so half their time would beat
the hardware (lower bound 0.5); and a step whose kernels take more than twice their isolated
time is waiting on something else, which is the step overheads' part (``base_us``,
``per_request_us``, ``per_token_us``: the host's launch and scheduling work), not the kernels'
(upper bound 2). An unbounded fit does leave that range: on the 11 calibration groups it put
vLLM's factors at 0.15 (with 7.1 ms per step) and SGLang-on-Blackwell's at 0 (with 29 us per
token), trading the kernel time for overheads collinear with it (a decode step's kernel time
hardly moves with its batch, like ``base_us``; a prefill's grows with its tokens, like
``per_token_us``), which then mispredicts every shape it was not fitted on."""


@dataclass(frozen=True, slots=True)
class FitOptions:
    """What the fit may move and how it weighs the metrics.

    Attributes:
        fit_factors: Fit the per-phase kernel factors (else they stay 1).
        fit_host: Fit the host per-request cost (else it stays 0).
        ttft_weight: Weight of the TTFT equations (TPOT has 1).
        factor_prior: Weight of the prior ``factor = 1`` (one pseudo-equation per factor).
        fit_streaming: Also fit the host's streaming cost per output token
            (:func:`~.streaming.fit_host`; only with ``fit_host``).
        source_hosts: Fit host delays per measurement file (:func:`~.fit.fit_backend`; only with
            ``fit_host``).
        generations: Fit step terms per GPU generation where the rows support it
            (:func:`~.fit.fit_generations`).
        factor_bounds: ``(low, high)``, the range each fitted kernel factor is kept in
            (:data:`FACTOR_BOUNDS`); ``low <= 1 <= high``.
        synchronous: Fit the overheads of engines without async scheduling
            (:data:`~.linear.SYNC_PARAMS`) where the rows of two groups or more (model, GPU)
            have such engines, kept only when they make the leave-one-configuration-out error
            smaller (:func:`~.fit.fit_backend`).
        per_layer: Fit a step overhead per decoder layer of the model where the rows have
            models of two layer counts or more, on the same condition.
    """

    fit_factors: bool = True
    fit_host: bool = True
    ttft_weight: float = 1.0
    factor_prior: float = 3.0
    fit_streaming: bool = True
    source_hosts: bool = True
    generations: bool = True
    factor_bounds: tuple[float, float] = FACTOR_BOUNDS
    synchronous: bool = True
    per_layer: bool = True

    def __post_init__(self) -> None:
        """Refuse kernel-factor bounds that exclude 1 or are not a range of positive factors."""
        check_factor_bounds("factor_bounds", self.factor_bounds)


def check_factor_bounds(name: str, bounds: tuple[float, float]) -> None:
    """Refuse (one line naming ``name``) bounds other than ``0 < low <= 1 <= high, low < high``."""
    lo, hi = bounds
    if not (0.0 < lo <= 1.0 <= hi < math.inf and lo < hi):
        raise ConfigError(name, bounds, "(low, high) with 0 < low <= 1 <= high and low < high")
