"""Hypervolume of the feasible front, and the plateau rule that stops a study.

Objectives are normalised to a minimisation space with fixed bounds ``[lo, hi]`` per objective:
``z = (v - lo) / (hi - lo)`` when minimising and ``(hi - v) / (hi - lo)`` when maximising; the
reference point is ``1.1`` in every coordinate. Bounds come from the study file
(``objectives[i].bounds``) or, failing that, from the feasible points of the first generation
that has any; once fixed they are stored with the study and never change, so hypervolumes of
different generations (and of a resumed run) compare. The front is kept incrementally.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

REFERENCE = 1.1


class HypervolumeTracker:
    """Feasible Pareto front and its normalised hypervolume.

    Args:
        directions: Objective directions.
        reference: A stored ``hv_reference`` (from a previous run), or ``None``.
        bounds: Fixed ``(lo, hi)`` per objective from the study file (``None`` = learn).
    """

    def __init__(
        self,
        directions: Sequence[str],
        reference: dict[str, Any] | None = None,
        bounds: Sequence[tuple[float, float] | None] | None = None,
    ) -> None:
        self._max = np.array([d == "maximize" for d in directions])
        self._given = list(bounds) if bounds else [None] * len(directions)
        self.reference = reference
        self._front = np.empty((0, len(directions)))

    def add(self, values: Sequence[Sequence[float]]) -> None:
        """Add feasible objective vectors (study directions)."""
        if not len(values):
            return
        pts = np.vstack([self._front, np.asarray(values, dtype=float)])
        self._front = pts[_nondominated(np.where(self._max, -pts, pts))]

    @property
    def front(self) -> np.ndarray[Any, Any]:
        """Non-dominated feasible objective vectors seen so far."""
        return self._front.copy()

    def hypervolume(self) -> float:
        """Normalised hypervolume of the front; fixes the bounds on first use with points."""
        if len(self._front) == 0:
            return 0.0
        if self.reference is None:
            self.reference = self._fix_reference()
        lo = np.array([b[0] for b in self.reference["bounds"]])
        hi = np.array([b[1] for b in self.reference["bounds"]])
        span = np.where(hi > lo, hi - lo, 1.0)
        z = np.where(self._max, (hi - self._front) / span, (self._front - lo) / span)
        ref = np.asarray(self.reference["point"], dtype=float)
        z = z[np.all(z < ref, axis=1)]
        if len(z) == 0:
            return 0.0
        if z.shape[1] == 1:
            return float(ref[0] - z.min())
        import moocore

        return float(moocore.hypervolume(z, ref=ref))

    def _fix_reference(self) -> dict[str, Any]:
        bounds = []
        for i, given in enumerate(self._given):
            if given is not None:
                bounds.append([float(given[0]), float(given[1])])
                continue
            col = self._front[:, i]
            lo, hi = float(col.min()), float(col.max())
            if hi <= lo:
                pad = max(abs(lo), 1.0) * 0.5
                lo, hi = lo - pad, hi + pad
            bounds.append([lo, hi])
        return {
            "point": [REFERENCE] * len(bounds),
            "bounds": bounds,
            "directions": ["maximize" if m else "minimize" for m in self._max],
            "normalisation": "min-form: (v-lo)/(hi-lo) if minimize else (hi-v)/(hi-lo)",
        }


def _nondominated(points: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Mask of non-dominated rows (minimisation); duplicates keep one copy."""
    import moocore

    return np.asarray(moocore.is_nondominated(points, keep_weakly=False), dtype=bool)


def converged(history: Sequence[Sequence[float]], tol: float, patience: int) -> bool:
    """True when the hypervolume grew by less than ``tol`` (relative) over ``patience`` steps.

    ``history`` holds ``[n_trials, hypervolume]`` per generation. A zero hypervolume (no
    feasible point yet) never counts as converged.
    """
    if len(history) <= patience:
        return False
    now, then = float(history[-1][1]), float(history[-1 - patience][1])
    if now <= 0.0:
        return False
    return now - then <= tol * max(then, 1e-12)
