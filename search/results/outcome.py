"""What ``tune`` and ``report`` print after the summary: fronts, best lines, load table.

A sweep judges every configuration at every load level, and load is the user's situation,
not a knob to choose: so a sweep gets one Pareto front and one "best" per level, then a table of
how the best configuration changes with load (issue 20). Other studies get one front and the
best configuration under each SLO set. Declared SLOs the study does not enforce as declared are
named first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from search.results.best import best_lines, best_per_slo, default_slo_sets
from search.results.front import varying_knobs
from search.results.judged import FACTS, declared_slos, fact_headers, facts, is_sweep
from search.results.labels import format_value, metric_label, metric_unit, short_value
from search.results.tables import pareto_table
from search.store.schema import STUDY
from search.study.load import LEVEL_KNOB
from search.study.slo import stored_notes

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial
    from rich.table import Table

Block = Any
"""A rich renderable or a plain line."""


def outcome_blocks(study: optuna.Study) -> list[tuple[Block, bool]]:
    """``(renderable or line, is_plain_text)`` to print in order."""
    notes = stored_notes(study.user_attrs.get(STUDY) or {})
    out: list[tuple[Block, bool]] = [(f"note: {note}", True) for note in notes]
    if not is_sweep(study):
        out.append((pareto_table(study), False))
        out.append(("best configuration under each SLO (best first objective):", True))
        out += [(line, True) for line in best_lines(study)]
        return out
    own = default_slo_sets(study)[:1]
    trials = study.get_trials(deepcopy=False)
    levels = sorted({float(t.params[LEVEL_KNOB]) for t in trials if LEVEL_KNOB in t.params})
    bests: list[tuple[float, FrozenTrial | None]] = []
    for level in levels:
        at = [t for t in trials if float(t.params.get(LEVEL_KNOB, -1)) == level]
        tag = f" at load level {level:g}"
        out.append((pareto_table(study, at, tag), False))
        lines = best_lines(study, own, at)
        out += [(f"best{tag}: {line}", True) for line in lines]
        bests.append((level, best_per_slo(study, own, at)[0][1]))
    out.append((best_by_load_table(study, bests), False))
    return out


def best_by_load_table(study: optuna.Study, bests: list[tuple[float, FrozenTrial | None]]) -> Table:
    """One row per load level: its best configuration (the knobs that change), objectives, facts."""
    from rich.table import Table

    found = [t for _, t in bests if t is not None]
    varying, _ = varying_knobs(found) if found else ([], {})
    varying = [k for k in varying if k != LEVEL_KNOB]
    objs = [(str(o["metric"])) for o in (study.user_attrs.get("objectives") or [])]
    table = Table(title=f"How the best configuration of {study.study_name} changes with load "
                  "(meeting the study's SLOs)", title_justify="left")  # fmt: skip
    slos = declared_slos(study)
    load_header, *headers = fact_headers(study, slos)
    table.add_column(load_header, justify="right")
    table.add_column("#", justify="right", style="dim")
    for k in varying:
        table.add_column(k.replace(".", ".\n"), justify="right", style="cyan")
    for m in objs:
        unit = f"\n({metric_unit(m)})" if metric_unit(m) else ""
        table.add_column(f"{metric_label(m, unit=False)}{unit}", justify="right", style="bold")
    for header in headers:
        table.add_column(header, justify="right")
    for level, t in bests:
        if t is None:
            table.add_row(f"{level:g}", "-", *["no config meets the SLOs"],
                          *[""] * (len(varying) + len(objs) + len(FACTS) - 2))  # fmt: skip
            continue
        load, *rest = facts(study, t, slos)
        cells = [load, str(t.number)]
        cells += [short_value(t.params[k]) if k in t.params else "-" for k in varying]
        cells += [format_value(m, v) for m, v in zip(objs, t.values or [], strict=False)]
        cells += rest
        table.add_row(*cells)
    return table
