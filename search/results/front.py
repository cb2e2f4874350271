"""The Pareto front: one dominance rule, and trials with the same objective values grouped.

:func:`nondominated` is the only dominance test in ``search``: the driver's running front, the
hypervolume tracker and the report's Pareto table all use it, so they agree. Configs with the
same objective values are one row of the Pareto table, ``pareto.csv`` and the best-per-SLO
lines (:func:`group_trials`).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from search.results.labels import short_value
from search.store.schema import is_feasible, study_objectives

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from search.trial import TrialResult


def nondominated(points: Any, maximise: Any, *, keep_ties: bool = True) -> np.ndarray[Any, Any]:
    """Mask of the rows of ``points`` no other row dominates.

    Args:
        points: One row of objective values per point.
        maximise: Per objective, whether more is better (a sequence of bools).
        keep_ties: Keep every copy of a point that appears more than once (else the first).
    """
    import moocore

    pts = np.asarray(points, dtype=float)
    pts = np.where(np.asarray(maximise, dtype=bool), -pts, pts)
    return np.asarray(moocore.is_nondominated(pts, keep_weakly=keep_ties), dtype=bool)


def pareto_front(results: Sequence[TrialResult], directions: Sequence[str]) -> list[TrialResult]:
    """The feasible non-dominated results, best first by the first objective."""
    feasible = [r for r in results if r.feasible]
    if not feasible:
        return []
    maximise = [d == "maximize" for d in directions]
    mask = nondominated([r.values for r in feasible], maximise)
    front = [r for r, keep in zip(feasible, mask, strict=True) if keep]
    sign = -1.0 if maximise[0] else 1.0
    return sorted(front, key=lambda r: float(sign * r.values[0]))


def pareto_of(trials: Sequence[FrozenTrial], directions: Sequence[str]) -> list[FrozenTrial]:
    """Feasible trials not dominated by another feasible trial; duplicates are all kept.

    Trials with the same objective values (:func:`same_values`) are on the front together or
    not at all: dominance is decided on each group's first trial, so a difference below
    ``SAME_VALUES_RTOL`` never pushes a config off the front. Sorted best first by the first
    objective, the members of a group together (by trial number).
    """
    feasible = [t for t in trials if is_feasible(t)]
    if not feasible:
        return []
    groups = group_trials(feasible)
    maximise = [d == "maximize" for d in directions]
    mask = nondominated([g.first.values for g in groups], maximise)
    front = [g for g, keep in zip(groups, mask, strict=True) if keep]
    sign = -1.0 if maximise[0] else 1.0
    front.sort(key=lambda g: (sign * g.first.values[0], g.first.number))
    return [t for g in front for t in g.trials]


def pareto_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The feasible non-dominated trials in the study directions, best first objective first."""
    trials = study.get_trials(deepcopy=False)
    return pareto_of(trials, [d for _, d in study_objectives(study)])


def pareto_groups(study: optuna.Study) -> list[TrialGroup]:
    """The Pareto front with configs of the same objective values grouped, best first."""
    return group_trials(pareto_trials(study))


@dataclass(frozen=True, slots=True)
class TrialGroup:
    """Trials whose objective values are the same (see :func:`same_values`): one report row.

    Configs often tie exactly: a knob that never binds (``max_num_seqs`` above the concurrency
    the workload reaches) gives the same simulation whatever its value.

    Attributes:
        trials: The members, lowest trial number first; the first one stands for the group
            (its metrics, config and number are what a row shows).
    """

    trials: tuple[FrozenTrial, ...]

    @property
    def first(self) -> FrozenTrial:
        """The representative: the member with the lowest trial number."""
        return self.trials[0]

    @property
    def numbers(self) -> list[int]:
        """Trial numbers of the members, ascending."""
        return [t.number for t in self.trials]

    def __len__(self) -> int:
        return len(self.trials)

    def any_of(self) -> dict[str, list[Any]]:
        """Knobs whose value differs among the members, each with its distinct values.

        A knob a member lacks (a conditional knob whose condition does not hold) counts as the
        value ``None``. Values are sorted (``None`` first), knobs by name.
        """
        knobs = sorted({k for t in self.trials for k in t.params})
        out = {}
        for k in knobs:
            distinct = {json.dumps(t.params.get(k), default=str): t.params.get(k)
                        for t in self.trials}  # fmt: skip
            if len(distinct) > 1:
                out[k] = sorted(distinct.values(), key=_value_order)
        return out

    def knob_cell(self, knob: str) -> str:
        """``"any of 64, 256"`` when the members differ in ``knob``, else its value (``-``)."""
        choices = self.any_of().get(knob)
        if choices is None:
            return short_value(self.first.params.get(knob, "-"))
        return "any of " + ", ".join("-" if v is None else short_value(v) for v in choices)


SAME_VALUES_RTOL = 1e-9
"""Two trials have the same objective values when each pair differs by at most this fraction
of the larger magnitude (``math.isclose(a, b, rel_tol=1e-9, abs_tol=0)``): exact ties from
deterministic simulations group, while any real difference (1e-6 relative is ~0.001 tok/s on
1000 tok/s) keeps its own row. Exact zeros equal only exact zeros."""


def same_values(a: Sequence[float] | None, b: Sequence[float] | None) -> bool:
    """True when ``a`` and ``b`` have the same length and agree within ``SAME_VALUES_RTOL``.

    ``None``, empty and NaN values are never the same as anything.
    """
    if not a or not b or len(a) != len(b):
        return False
    return all(math.isclose(x, y, rel_tol=SAME_VALUES_RTOL, abs_tol=0.0)
               for x, y in zip(a, b, strict=True))  # fmt: skip


def group_trials(trials: Sequence[FrozenTrial]) -> list[TrialGroup]:
    """Group trials with the same objective values; groups keep the order of ``trials``.

    A trial joins a group when its values are the same as those of the group's first trial
    (closeness is not transitive; comparing with one fixed member keeps groups well defined).
    A group stands where its first trial stood in ``trials``. Trials without finite values
    each form their own group.
    """
    members: list[list[FrozenTrial]] = []
    keys: list[tuple[float, int]] = []  # (first objective value, group index), sorted
    for t in trials:
        values = t.values
        if not values or not math.isfinite(values[0]):
            members.append([t])
            continue
        v0 = float(values[0])
        tol = 2.0 * SAME_VALUES_RTOL * abs(v0)
        i = bisect.bisect_left(keys, (v0 - tol, -1))
        while i < len(keys) and keys[i][0] <= v0 + tol:
            group = members[keys[i][1]]
            if same_values(group[0].values, values):
                group.append(t)
                break
            i += 1
        else:
            bisect.insort(keys, (v0, len(members)))
            members.append([t])
    return [TrialGroup(tuple(sorted(m, key=lambda t: t.number))) for m in members]


def _value_order(v: Any) -> tuple[int, Any]:
    if v is None:
        return (0, 0)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return (2, str(v))
    return (1, v)


def varying_knobs(trials: Sequence[FrozenTrial]) -> tuple[list[str], dict[str, Any]]:
    """Knobs whose values differ between ``trials``, and the fixed ones with their value."""
    knobs = sorted({k for t in trials for k in t.params})
    varying, fixed = [], {}
    for k in knobs:
        values = {json.dumps(t.params.get(k), default=str) for t in trials}
        if len(values) > 1:
            varying.append(k)
        else:
            fixed[k] = trials[0].params.get(k)
    return varying, fixed
