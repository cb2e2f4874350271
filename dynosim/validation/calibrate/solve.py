"""The bounded robust least squares the calibration fits solve (:func:`bounded`).

``scipy.optimize.least_squares`` with a ``soft_l1`` loss on relative errors, the kernel factors
kept in their range (:data:`~.options.FACTOR_BOUNDS`) with ``prefill <= high`` handled as an
active set, every other free parameter at least 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from dynosim.validation.calibrate.linear import F64

__all__ = ["F_SCALE", "bounded"]

F_SCALE = 0.1
"""The relative error beyond which :func:`_solve`'s ``soft_l1`` loss grows linearly."""


def _solve(a: F64, b: F64, free: npt.NDArray[np.bool_], fixed: F64, lower: F64, upper: F64) -> F64:
    """``theta`` minimising the robust loss of ``a theta - b``, its free entries in bounds."""
    b = b - a[:, ~free] @ fixed[~free]
    a_free = a[:, free]
    # Solve for z = theta * scale, whose columns have comparable size (us and factors mix).
    scale = np.maximum(np.abs(a_free).max(axis=0), 1e-12)
    a_scaled = a_free / scale
    lo, hi = lower[free], upper[free]
    res = least_squares(
        lambda z: a_scaled @ z - b,
        x0=np.clip(fixed[free] + 0.1, lo, hi) * scale,
        jac=lambda z: a_scaled,
        bounds=(lo * scale, hi * scale),
        loss="soft_l1",
        f_scale=F_SCALE,
        method="trf",
    )
    theta = fixed.copy()
    theta[free] = res.x / scale
    return theta


def bounded(
    a: F64,
    b: F64,
    free: npt.NDArray[np.bool_],
    fixed: F64,
    factors: Sequence[int],
    bounds: tuple[float, float],
) -> F64:
    """:func:`_solve`, each slot's kernel factors in ``bounds`` (:data:`~.options.FACTOR_BOUNDS`).

    ``factors``: the index of each fitted slot's ``prefill - decode`` (its ``decode`` follows).
    Every other free entry is at least 0. ``decode`` in ``[low, high]`` and ``prefill - decode``
    in ``[0, high - low]`` are box bounds; ``prefill <= high`` is not. The loss is convex, so
    where the box's optimum has ``prefill > high`` that constraint is active at the optimum:
    the slot is solved again with ``prefill = high`` (``high * K_prefill`` moved to ``b`` and
    ``decode`` multiplying the rest of the kernel time, ``K - K_prefill``) until no slot is
    above it.
    """
    lo, hi = bounds
    lower, upper = np.zeros(len(fixed)), np.full(len(fixed), np.inf)
    for q in factors:
        upper[q] = hi - lo
        lower[q + 1], upper[q + 1] = lo, hi
    a, free, fixed = a.copy(), free.copy(), fixed.copy()
    pinned: list[int] = []
    while True:
        theta = _solve(a, b, free, fixed, lower, upper)
        over = [q for q in factors if q not in pinned and theta[q] + theta[q + 1] > hi * (1 + 1e-9)]
        if not over:
            break
        for q in over:  # prefill = high: K_prefill's column times high goes to the fixed part
            a[:, q + 1] -= a[:, q]
            free[q], fixed[q] = False, hi
            pinned.append(q)
    for q in pinned:  # back to prefill - decode
        theta[q] = hi - theta[q + 1]
    return theta
