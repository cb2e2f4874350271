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
from typing import TYPE_CHECKING, Any

import numpy as np

from search.results.front import nondominated
from search.store.schema import HV_REFERENCE, is_feasible, study_objectives

if TYPE_CHECKING:
    import optuna

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
        self._front = pts[nondominated(pts, self._max, keep_ties=False)]

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


def recomputed_hypervolume(study: optuna.Study) -> tuple[list[int], list[float]]:
    """Hypervolume of the feasible front after each COMPLETE trial (in trial-number order).

    Uses the stored ``hv_reference`` when there is one, so values match the stored history;
    otherwise bounds from every feasible point.
    """
    import optuna

    dirs = [d for _, d in study_objectives(study)]
    done = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    done.sort(key=lambda t: t.number)
    pts = np.array([t.values for t in done if is_feasible(t)], dtype=float)
    if len(pts) == 0:
        return list(range(1, len(done) + 1)), [0.0] * len(done)
    ref = study.user_attrs.get(HV_REFERENCE)
    if not ref:
        lo, hi = pts.min(axis=0), pts.max(axis=0)
        pad = np.where(hi > lo, 0.0, np.maximum(np.abs(lo), 1.0) * 0.5)
        bounds = [[float(a), float(b)] for a, b in zip(lo - pad, hi + pad, strict=True)]
        ref = {"point": [REFERENCE] * len(dirs), "bounds": bounds}
    tracker = HypervolumeTracker(dirs, reference=ref)
    hv, out = 0.0, []
    for t in done:
        if is_feasible(t):
            before = tracker.front
            tracker.add([t.values])
            if not np.array_equal(before, tracker.front):  # a dominated point changes nothing
                hv = tracker.hypervolume()
        out.append(hv)
    return list(range(1, len(done) + 1)), out
