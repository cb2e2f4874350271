"""Rows and rich tables of a study: every trial, the Pareto front, knob importance, studies.

``rich`` is imported inside the functions that draw, so that reading a study does not pay for it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.results.counts import trial_counts
from search.results.front import (
    SAME_VALUES_RTOL,
    group_trials,
    pareto_groups,
    pareto_of,
    pareto_trials,
    varying_knobs,
)
from search.results.importance import EVALUATOR, ObjectiveImportance, knob_order, objective_header
from search.results.judged import declared_slos, fact_headers, facts
from search.results.labels import (
    format_value,
    knobs_text,
    metric_label,
    metric_unit,
)
from search.store.lease import LEASE_KEY, Holder
from search.store.open import open_storage
from search.store.schema import (
    CONFIG,
    CONFIG_HASH,
    CONSTRAINTS,
    FAIL_REASON,
    HV_HISTORY,
    REASON,
    SEED,
    STATUS,
    WALL_S,
    constraint_names,
    is_feasible,
    study_objectives,
    trial_metrics,
)
from search.study.load import LEVEL_KNOB

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial
    from rich.table import Table
    from rich.text import Text


def trials_frame(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per trial (every state), every knob, objective, constraint and metric.

    Columns: ``number, state, feasible, pareto, infeasible_reason``, ``params.<knob>``,
    ``objective.<metric>``, ``constraint.<metric><op><value>``, ``metrics.<name>``, then
    ``seed, config_hash, wall_s, datetime_start, datetime_complete, config``. Every row has
    every column (``None`` where a trial lacks a value).
    """
    trials = study.get_trials(deepcopy=False)
    on_front = {t.number for t in pareto_trials(study)}
    objs = [m for m, _ in study_objectives(study)]
    cons = constraint_names(study)
    knobs = sorted({k for t in trials for k in t.params})
    metric_cols: dict[str, None] = {}
    for t in trials:
        metric_cols.update(dict.fromkeys(trial_metrics(t)))
    rows = []
    for t in trials:
        u, metrics = t.user_attrs, trial_metrics(t)
        values = list(t.values or [None] * len(objs))
        c_vals = list(t.system_attrs.get(CONSTRAINTS) or [None] * len(cons))
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "feasible": is_feasible(t),
            "pareto": t.number in on_front,
            "infeasible_reason": u.get(REASON) or t.system_attrs.get(FAIL_REASON),
        }
        row.update({f"params.{k}": t.params.get(k) for k in knobs})
        row.update({f"objective.{m}": v for m, v in zip(objs, values, strict=False)})
        row.update({f"constraint.{c}": v for c, v in zip(cons, c_vals, strict=False)})
        row.update({f"metrics.{m}": metrics.get(m) for m in metric_cols})
        row.update({k: u.get(k) for k in (SEED, CONFIG_HASH, WALL_S)})
        row["datetime_start"] = t.datetime_start.isoformat() if t.datetime_start else None
        row["datetime_complete"] = t.datetime_complete.isoformat() if t.datetime_complete else None
        row["config"] = json.dumps(u[CONFIG], sort_keys=True) if u.get(CONFIG) else None
        rows.append(row)
    return rows


def write_csv(
    rows: Sequence[Mapping[str, Any]], path: Path, columns: Sequence[str] | None = None
) -> Path:
    """Write rows (all with the same keys) as CSV; ``columns`` default to the first row's."""
    fields = list(columns) if columns is not None else list(rows[0]) if rows else []
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def pareto_rows(study: optuna.Study, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of :func:`trials_frame` for ``pareto.csv``: one per distinct objective vector.

    A row is the group's first trial with ``configs`` (how many share its objective values) and
    ``group_trials`` (their numbers, space separated) after ``number``; a knob the configs
    differ in reads ``any of a, b``.
    """
    by_number = {r["number"]: r for r in rows}
    out = []
    for g in pareto_groups(study):
        row = dict(by_number[g.first.number])
        head = {"number": row.pop("number"), "configs": len(g),
                "group_trials": " ".join(map(str, g.numbers))}  # fmt: skip
        for k in g.any_of():
            row[f"params.{k}"] = g.knob_cell(k)
        out.append({**head, **row})
    return out


def pareto_table(
    study: optuna.Study, trials: Sequence[FrozenTrial] | None = None, title: str = ""
) -> Table:
    """The Pareto front as a rich table: one row per distinct objective vector.

    Columns: the representative trial, how many configs share its values (when any do), the
    knobs that differ on the front (``any of ...`` where the configs of a row differ),
    objectives with units, then where the representative was judged and what it costs
    (:data:`search.results.judged.FACTS`: load, GPUs, TTFT/ITL p90, cost, declared SLOs).
    ``trials`` (default: all) narrows the front to some trials, e.g. one load level of a sweep.
    """
    from rich.table import Table

    everything = study.get_trials(deepcopy=False) if trials is None else list(trials)
    directions = [d.name.lower() for d in study.directions]
    front = pareto_of(everything, directions)
    groups = group_trials(front)
    objs = study_objectives(study)
    slos = declared_slos(study)
    varying, fixed = varying_knobs(front) if front else ([], {})
    if len(groups) == 1:
        varying, fixed = sorted({k for t in front for k in t.params}), {}
    varying = [k for k in varying if k != LEVEL_KNOB]  # a sweep's load is no knob to choose
    fixed.pop(LEVEL_KNOB, None)
    n_feasible = sum(is_feasible(t) for t in everything)
    grouped = len(groups) < len(front)
    points = f"{len(groups)} points ({len(front)} configs)" if grouped else str(len(front))
    table = Table(title=f"Pareto front of {study.study_name}{title}: {points} of {n_feasible} "
                  "feasible trials", title_justify="left")  # fmt: skip
    notes = []
    if fixed:
        notes.append("same in every Pareto config: " + knobs_text(fixed))
    if grouped:
        notes.append(
            f"a row = the configs with the same objective values (to {SAME_VALUES_RTOL:g} "
            "relative); #: the lowest trial number; any of: the values those configs take"
        )
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    table.add_column("#", justify="right", style="dim")
    if grouped:
        table.add_column("configs", justify="right", style="dim")
    for k in varying:  # headers break at dots and before units, so narrow terminals cope
        table.add_column(k.replace(".", ".\n"), justify="right", style="cyan")
    for m, d in objs:
        arrow = "↑" if d == "maximize" else "↓"
        unit = f"\n({metric_unit(m)})" if metric_unit(m) else ""
        table.add_column(f"{metric_label(m, unit=False)} {arrow}{unit}", justify="right",
                         style="bold")  # fmt: skip
    for header in fact_headers(study, slos):
        table.add_column(header, justify="right")
    for g in groups:
        t = g.first
        cells = [str(t.number), *([str(len(g))] if grouped else []),
                 *(g.knob_cell(k) for k in varying)]  # fmt: skip
        cells += [format_value(m, v) for (m, _), v in zip(objs, t.values, strict=True)]
        *rest, ok = facts(study, t, slos)
        cells += [*rest, f"[green]{ok}[/green]" if ok == "✓" else f"[red]{ok}[/red]"]
        table.add_row(*cells)
    return table


def importance_table(study_name: str, importances: Sequence[ObjectiveImportance]) -> Table | Text:
    """A rich table (knobs x objectives, shares in %) or, when nothing was computed, a message.

    The largest share of each objective is bold; objectives that could not be assessed say why
    in the caption.
    """
    from rich.table import Table
    from rich.text import Text

    done = [imp for imp in importances if imp.shares]
    notes = [f"{objective_header(imp)}: {imp.note}" for imp in importances if not imp.shares]
    if not done:
        text = "; ".join(notes) or "no objectives"
        return Text(f"knob importance of {study_name}: {text}", style="yellow")
    n = max(imp.n_trials for imp in done)
    table = Table(
        title=f"Knob importance of {study_name} ({EVALUATOR}, {n} runnable trials)",
        title_justify="left",
        caption="\n".join(["share of each objective's importance", *notes]),
        caption_justify="left",
    )
    table.add_column("knob", style="cyan")
    for imp in done:
        table.add_column(objective_header(imp), justify="right")
    for k in knob_order(done):
        cells = [k]
        for imp in done:
            v = imp.shares.get(k)
            cell = "-" if v is None else f"{100.0 * v:.0f}%"
            top = v is not None and v == max(imp.shares.values())
            cells.append(f"[bold]{cell}[/bold]" if top else cell)
        table.add_row(*cells)
    return table


def studies_table(storage_url: str) -> Table:
    """One row per study: trials by state, feasible count, Pareto size, status, hypervolume.

    The counts are :func:`search.results.counts.trial_counts`, as ``tune`` and ``report`` show them.

    Raises:
        DynosimError: The storage cannot be opened.
    """
    from rich.table import Table

    storage = open_storage(storage_url)
    table = Table(title=f"studies in {storage_url}", title_justify="left")
    for col in ("name", "status", "trials", "complete/running/failed", "feasible", "Pareto", "HV"):
        table.add_column(col, justify="left" if col in ("name", "status") else "right")
    for s in sorted(storage.get_all_studies(), key=lambda s: s.study_name):
        study_id = storage.get_study_id_from_name(s.study_name)
        trials = storage.get_all_trials(study_id, deepcopy=False)
        c = trial_counts(trials)
        directions = [d.name.lower() for d in s.directions]
        history = s.user_attrs.get(HV_HISTORY) or []
        hv = max((float(h[1]) for h in history), default=None)
        table.add_row(
            s.study_name,
            study_status(s.user_attrs.get(STATUS), s.system_attrs),
            str(c.total),
            f"{c.complete}/{c.running}/{c.failed}",
            str(c.feasible),
            str(len(pareto_of(trials, directions))),
            "-" if hv is None else f"{hv:.4f}",
        )
    return table


def study_status(status: Any, system_attrs: dict[str, Any]) -> str:
    """The stored status; ``running`` names its driver, or says ``interrupted`` if none is."""
    if status != "running":
        return str(status or "-")
    holder = Holder.parse(system_attrs.get(LEASE_KEY))
    if holder is None or holder.stale_reason() is not None:
        return "interrupted"
    return f"running ({holder.label})"
