"""The best configuration under each SLO set: the study's own SLOs, then a TTFT ladder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from search.results.front import TrialGroup, same_values
from search.results.judged import declared_slos, facts_line
from search.results.labels import (
    constraint_label,
    format_value,
    knobs_text,
    metric_label,
    metric_unit,
)
from search.store.schema import (
    STUDY,
    is_feasible,
    is_runnable,
    slo_constraints,
    study_objectives,
    trial_metrics,
)
from search.study.load import LEVEL_KNOB
from search.study.objectives import Constraint

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

TTFT_LADDER_MS = (500.0, 1000.0, 2000.0)
"""TTFT thresholds for which ``best_per_slo`` names a best configuration by default."""


@dataclass(frozen=True, slots=True)
class SloSet:
    """A named set of SLO constraints a configuration must meet together.

    Attributes:
        label: What a reader sees, e.g. ``TTFT p90 ≤ 500 ms``.
        constraints: The constraints (all must hold).
    """

    label: str
    constraints: tuple[Constraint, ...]

    def met_by(self, trial: FrozenTrial) -> bool:
        """True when ``trial`` ran and meets every constraint of the set."""
        metrics = trial_metrics(trial)
        return is_runnable(trial) and all(c.violation(metrics) <= 0 for c in self.constraints)


def default_slo_sets(study: optuna.Study) -> list[SloSet]:
    """The study's SLOs, then a TTFT ladder (500/1000/2000 ms) keeping the other SLOs.

    The ladder uses the TTFT statistic the study constrains, else ``time_to_first_token.p90``
    when the trials report it. A capacity study has no ladder: each trial was measured at the
    load where its own SLO just holds, so a tighter TTFT is a question for another study.
    """
    slos = slo_constraints(study)
    label = ", ".join(constraint_label(c) for c in slos) or "no SLO"
    sets = [SloSet(f"study SLOs ({label})" if slos else label, tuple(slos))]
    load = (study.user_attrs.get(STUDY) or {}).get("load") or {}
    if load.get("mode") == "capacity":
        return sets
    ttft = [c for c in slos if c.metric.startswith("time_to_first_token.") and c.op == "<="]
    metric = ttft[0].metric if ttft else "time_to_first_token.p90"
    reported = any(metric in trial_metrics(t) for t in study.get_trials(deepcopy=False))
    if not ttft and not reported:
        return sets
    others = tuple(c for c in slos if c.metric != metric)
    own = {c.value for c in ttft}
    for ms in TTFT_LADDER_MS:
        if ms in own:
            continue
        c = Constraint(metric, "<=", ms)
        extra = " + other SLOs" if others else ""
        sets.append(SloSet(constraint_label(c) + extra, (c, *others)))
    return sets


def best_per_slo(
    study: optuna.Study,
    slos: Sequence[SloSet] | None = None,
    trials: Sequence[FrozenTrial] | None = None,
) -> list[tuple[SloSet, FrozenTrial | None]]:
    """For each SLO set, the trial meeting it that is best in the first objective.

    Ties on the first objective go to the next objectives, then to the lowest trial number.

    Args:
        study: A loaded study.
        slos: SLO sets to answer; :func:`default_slo_sets` when ``None``.
        trials: The candidates (default: every trial), e.g. one load level of a sweep.

    Returns:
        ``(slo_set, trial or None)`` in the order of ``slos``.
    """
    return [(s, g.first if g else None) for s, g in best_groups_per_slo(study, slos, trials)]


def best_groups_per_slo(
    study: optuna.Study,
    slos: Sequence[SloSet] | None = None,
    trials: Sequence[FrozenTrial] | None = None,
) -> list[tuple[SloSet, TrialGroup | None]]:
    """Like :func:`best_per_slo`, with every config meeting the set that ties with the best.

    ``trials`` (default: all) narrows the candidates, e.g. to one load level of a sweep.

    Returns:
        ``(slo_set, group or None)``; the group's first trial is :func:`best_per_slo`'s answer.
    """
    sets = default_slo_sets(study) if slos is None else list(slos)
    objs = study_objectives(study)
    signs = [-1.0 if d == "maximize" else 1.0 for _, d in objs]
    if trials is None:
        trials = study.get_trials(deepcopy=False)
    out: list[tuple[SloSet, TrialGroup | None]] = []
    for s in sets:
        ok = [t for t in trials if s.met_by(t) and (s.constraints or is_feasible(t))]
        best = min(ok, key=lambda t: ([g * v for g, v in zip(signs, t.values, strict=True)],
                                      t.number), default=None)  # fmt: skip
        if best is None:
            out.append((s, None))
            continue
        ties = [t for t in ok if t is best or same_values(t.values, best.values)]
        out.append((s, TrialGroup(tuple(sorted(ties, key=lambda t: t.number)))))
    return out


def best_lines(
    study: optuna.Study,
    slos: Sequence[SloSet] | None = None,
    trials: Sequence[FrozenTrial] | None = None,
) -> list[str]:
    """Per SLO set: the best trial and its objectives with units, then (indented) its knobs.

    When other configs meeting the set have the same objective values, the line says how many
    and the knobs they differ in follow as ``knob: any of a, b``. A last indented line says
    where it was judged (:func:`search.results.judged.facts_line`: load, GPUs, TTFT/ITL p90,
    cost, whether every declared SLO holds).
    """
    objs = study_objectives(study)
    declared = declared_slos(study)
    lines = []
    for s, g in best_groups_per_slo(study, slos, trials):
        if g is None:
            lines.append(f"{s.label}: no trial meets it")
            continue
        t = g.first
        vals = ", ".join(
            f"{metric_label(m, unit=False)} {format_value(m, v)} {metric_unit(m)}".rstrip()
            for (m, _), v in zip(objs, t.values, strict=True)
        )
        any_of = g.any_of()
        same = ""
        if len(g) > 1:
            others = ", ".join(f"#{n}" for n in g.numbers[1:6]) + (", ..." if len(g) > 6 else "")
            same = f" (and {others}: {len(g)} configs with these values)"
        fixed = {k: v for k, v in t.params.items() if k not in any_of and k != LEVEL_KNOB}
        text = f"{s.label}: trial #{t.number}{same}: {vals}\n    {knobs_text(fixed)}"
        for k in any_of:
            text += f"\n    {k}: {g.knob_cell(k)}"
        text += "\n    " + facts_line(study, t, declared)
        lines.append(text)
    return lines
