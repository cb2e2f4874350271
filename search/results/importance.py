"""Knob importance per objective: which knobs decide how good a configuration is.

For each objective, Optuna's PED-ANOVA (``optuna.importance.PedAnovaImportanceEvaluator``)
compares where a knob's values lie among the best trials (the top 10%, at least the best
``MIN_TOP_TRIALS``) with where they lie among all the trials used; a knob whose best values
are spread like all of its values does not matter. Shares are normalised to sum to 1 per
objective, so they rank knobs within an objective, not across objectives.

Why PED-ANOVA and not fANOVA (``FanovaImportanceEvaluator``), read in Optuna 5.0's source:

* Conditional knobs. fANOVA fits a random forest on the *intersection* search space
  (``optuna.search_space.intersection_search_space``): a knob missing from any trial is
  dropped, so ``kv_router.overlap_weight`` (only when ``router: kv_aware``) never gets an
  importance. PED-ANOVA (conditional PED-ANOVA, KDD 2026) assesses every knob that appears
  in a trial, inside the regime where it exists, weighted by how often that regime is among
  the best trials.
* Categorical knobs. PED-ANOVA uses a categorical Parzen estimator per choice; fANOVA
  one-hot encodes them for the forest. Both work; PED-ANOVA needs fewer trials.
* Dependencies and determinism. fANOVA needs scikit-learn (not installed, and heavy);
  PED-ANOVA is numpy-only and has no random forest, so the same study gives the same shares.
* Optimizer bias. With ``evaluate_on_local`` (the default, kept) the best trials are compared
  with the trials the optimizer actually sampled, not with a uniform spread, so a knob
  NSGA-II happened to concentrate on does not look important for that reason alone. The price:
  a knob that matters but that the optimizer already fixed everywhere looks less important.

Which trials: those that ran (COMPLETE with metrics, finite objective values). Configs that
could not run carry penalty values, not measurements, and are left out; runnable configs that
violate an SLO are kept, since their objective values are real (leaving them out would hide a
knob that raises throughput exactly by breaking TTFT). An objective with fewer than
``MIN_TRIALS`` such trials says "not enough trials"; one with the same value in every trial
(within ``search.results.front.SAME_VALUES_RTOL``) says it is constant; when the best trials look
like all trials for every knob, it says no knob stands out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from search.results.front import SAME_VALUES_RTOL
from search.results.labels import format_value, metric_label
from search.store.schema import is_runnable, study_objectives

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

MIN_TRIALS = 10
"""Fewest runnable trials for which an objective's knob importance is computed."""
TARGET_QUANTILE = 0.1
"""The best trials are the top 10% of the runnable ones..."""
MIN_TOP_TRIALS = 5
"""...and at least this many (Optuna's advice for a stable PED-ANOVA)."""
EVALUATOR = "PED-ANOVA"


@dataclass(frozen=True, slots=True)
class ObjectiveImportance:
    """The knob importance of one objective.

    Attributes:
        metric: The objective's metric.
        direction: ``maximize`` or ``minimize``.
        n_trials: Runnable trials used.
        shares: Knob -> share of the importance (sums to 1), largest first; empty when not
            computed (see ``note``).
        note: Why ``shares`` is empty (``not enough trials ...``, ``constant ...``), else ``""``.
    """

    metric: str
    direction: str
    n_trials: int
    shares: dict[str, float] = field(default_factory=dict)
    note: str = ""


def usable_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Trials that ran and have finite objective values, in trial-number order."""
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if is_runnable(t) and all(math.isfinite(v) for v in t.values)
    ]
    return sorted(trials, key=lambda t: t.number)


def knob_importances(study: optuna.Study) -> list[ObjectiveImportance]:
    """Knob importance of each objective of ``study`` (PED-ANOVA over the runnable trials)."""
    trials = usable_trials(study)
    return [
        _objective_importance(study, trials, i, metric, direction)
        for i, (metric, direction) in enumerate(study_objectives(study))
    ]


def _objective_importance(
    study: optuna.Study, trials: Sequence[FrozenTrial], i: int, metric: str, direction: str
) -> ObjectiveImportance:
    import optuna

    n = len(trials)
    if n < MIN_TRIALS:
        note = f"not enough trials ({n} runnable, need {MIN_TRIALS})"
        return ObjectiveImportance(metric, direction, n, note=note)
    values = [t.values[i] for t in trials]
    lo, hi = min(values), max(values)
    if hi - lo <= SAME_VALUES_RTOL * max(abs(lo), abs(hi)):
        note = f"constant ({format_value(metric, lo)} in all {n} runnable trials)"
        return ObjectiveImportance(metric, direction, n, note=note)
    used = {t.number for t in trials}
    sign = -1.0 if direction == "maximize" else 1.0  # PED-ANOVA ranks low targets best

    def target(t: FrozenTrial) -> float:
        # Optuna's evaluators skip trials whose target is not finite: that leaves out the rest.
        return sign * t.values[i] if t.number in used else math.nan

    knobs = sorted({k for t in trials for k in t.params})
    quantile = min(0.5, max(TARGET_QUANTILE, MIN_TOP_TRIALS / n))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
    try:
        with warnings.catch_warnings():  # "few trials in a regime", "normalize is experimental"
            warnings.simplefilter("ignore")
            raw = optuna.importance.get_param_importances(
                study, evaluator=evaluator, params=knobs, target=target, normalize=False
            )
    except ValueError as exc:  # a report must not fail on its last, optional table
        return ObjectiveImportance(metric, direction, n, note=f"not computed ({exc})")
    total = sum(raw.values())
    if not total > 0:
        note = f"no knob stands out (the best trials look like all {n})"
        return ObjectiveImportance(metric, direction, n, note=note)
    shares = {k: v / total for k, v in sorted(raw.items(), key=lambda kv: (-kv[1], kv[0]))}
    return ObjectiveImportance(metric, direction, n, shares=shares)


def knob_order(importances: Sequence[ObjectiveImportance]) -> list[str]:
    """Knobs by their largest share over the objectives, then by name."""
    best: dict[str, float] = {}
    for imp in importances:
        for k, v in imp.shares.items():
            best[k] = max(best.get(k, 0.0), v)
    return sorted(best, key=lambda k: (-best[k], k))


def objective_header(imp: ObjectiveImportance) -> str:
    """The objective's short name with its direction: ``TTFT p90 ↓``."""
    arrow = "↑" if imp.direction == "maximize" else "↓"
    return f"{metric_label(imp.metric, unit=False)} {arrow}"
