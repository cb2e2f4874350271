"""Study reports: the feasible Pareto front, CSV of every trial, best configuration per SLO.

Pure functions over a loaded ``optuna.Study`` whose trials follow the layout written by
``search.storage`` (``params`` = knobs, ``values`` in study directions, constraint values in
``system_attrs["constraints"]`` with ``<= 0`` satisfied, ``metrics``/``config``/``feasible`` in
``user_attrs``). Configs with the same objective values are one row of the Pareto table,
``pareto.csv`` and the best-per-SLO lines (:func:`group_trials`). The HTML plots live in
``search.plots``, knob importance in ``search.importance``; ``write_report`` writes them all.
"""

from __future__ import annotations

import bisect
import csv
import json
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dynosim.errors import DynosimError
from search.problem import Constraint

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial
    from rich.table import Table

TTFT_LADDER_MS = (500.0, 1000.0, 2000.0)
"""TTFT thresholds for which ``best_per_slo`` names a best configuration by default."""
KEY_METRICS = (
    "output_token_throughput_per_gpu",
    "output_token_throughput_per_user.avg",
    "time_to_first_token.p90",
    "inter_token_latency.p90",
    "goodput",
    "prefix_cache_hit_rate",
    "cost_per_million_output_tokens",
)
"""Metrics shown beside the objectives in hover text."""
_NAMES: dict[str, tuple[str, str]] = {  # metric stem -> (short name, unit)
    "time_to_first_token": ("TTFT", "ms"),
    "inter_token_latency": ("ITL", "ms"),
    "request_latency": ("latency", "ms"),
    "output_token_throughput_per_user": ("speed/user", "tok/s/user"),
    "output_token_throughput_per_gpu": ("throughput/GPU", "tok/s/GPU"),
    "output_token_throughput": ("throughput", "tok/s"),
    "request_throughput": ("requests", "req/s"),
    "goodput": ("goodput", "req/s"),
    "prefix_cache_hit_rate": ("prefix hits", "%"),
    "gpu_hours": ("GPU hours", "GPU·h"),
    "cost_per_million_output_tokens": ("cost", "$/Mtok"),
    "simulated_duration_s": ("simulated", "s"),
    "wall_s": ("wall", "s"),
    "capacity_rps": ("capacity", "req/s"),
    "capacity_rps_per_gpu": ("capacity req/GPU", "req/s/GPU"),
    "capacity_output_tokens_per_s_per_gpu": ("capacity/GPU", "tok/s/GPU"),
    "load_level": ("load", ""),
    "gpus": ("GPUs", ""),
    "slo_attainment": ("SLO attainment", "%"),
    "utilization": ("utilization", "%"),
}
_FRACTIONS = frozenset({"prefix_cache_hit_rate", "slo_attainment", "utilization"})
"""Metrics stored as fractions in [0, 1] and shown as percent."""
_OPS = {"<=": "≤", ">=": "≥"}


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
        metrics = trial.user_attrs.get("metrics") or {}
        return is_runnable(trial) and all(c.violation(metrics) <= 0 for c in self.constraints)


# --------------------------------------------------------------------------- names and units
def metric_label(metric: str, *, unit: bool = True) -> str:
    """Short name of a metric with its unit: ``time_to_first_token.p90`` -> ``TTFT p90 (ms)``."""
    stem, _, stat = metric.partition(".")
    short, u = _NAMES.get(stem, (stem, ""))
    text = f"{short} {stat}" if stat else short
    return f"{text} ({u})" if unit and u else text


def metric_unit(metric: str) -> str:
    """Unit of a metric (``ms``, ``tok/s/GPU``...), ``""`` when unknown."""
    return _NAMES.get(metric.partition(".")[0], ("", ""))[1]


def format_value(metric: str, value: float | None) -> str:
    """A metric value for a reader: thousands separators, fractions (hit rate...) as percent."""
    if value is None or not math.isfinite(value):
        return "-"
    if metric.partition(".")[0] in _FRACTIONS:
        return f"{100.0 * value:.1f}"
    mag = abs(value)
    if mag >= 100:
        return f"{value:,.0f}"
    if mag >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def constraint_label(c: Constraint) -> str:
    """``time_to_first_token.p90 <= 2000`` -> ``TTFT p90 ≤ 2000 ms``."""
    label = metric_label(c.metric, unit=False)
    return f"{label} {_OPS[c.op]} {c.value:g} {metric_unit(c.metric)}".rstrip()


def knobs_text(params: Mapping[str, Any]) -> str:
    """``tp=4 router=kv ...`` in key order."""
    return " ".join(f"{k}={_short(v)}" for k, v in sorted(params.items()))


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


# --------------------------------------------------------------------------- study structure
def objectives(study: optuna.Study) -> list[tuple[str, str]]:
    """``(metric, direction)`` per objective; ``objective_i`` when the study does not say."""
    dirs = [d.name.lower() for d in study.directions]
    stored = study.user_attrs.get("objectives") or []
    if len(stored) == len(dirs):
        return [(str(o["metric"]), d) for o, d in zip(stored, dirs, strict=True)]
    return [(f"objective_{i}", d) for i, d in enumerate(dirs)]


def slo_constraints(study: optuna.Study) -> list[Constraint]:
    """The study's SLO constraints (without the built-in ``runnable`` entry)."""
    raw = study.user_attrs.get("constraints") or []
    return [
        Constraint(str(c["metric"]), c["op"], float(c["value"]))
        for c in raw
        if c.get("metric") != "runnable"
    ]


def _constraint_names(study: optuna.Study) -> list[str]:
    raw = study.user_attrs.get("constraints") or []
    return [f"{c['metric']}{c['op']}{c['value']:g}" for c in raw]


def is_feasible(trial: FrozenTrial) -> bool:
    """COMPLETE with finite values, not marked infeasible, every constraint ``<= 0``."""
    import optuna

    if trial.state != optuna.trial.TrialState.COMPLETE or not trial.values:
        return False
    if trial.user_attrs.get("feasible") is False:
        return False
    if not all(math.isfinite(v) for v in trial.values):
        return False
    return all(float(c) <= 0 for c in trial.system_attrs.get("constraints", ()))


def is_runnable(trial: FrozenTrial) -> bool:
    """COMPLETE with metrics: the config ran (it may still violate an SLO)."""
    import optuna

    return (
        trial.state == optuna.trial.TrialState.COMPLETE
        and bool(trial.values)
        and bool(trial.user_attrs.get("metrics"))
    )


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
    import moocore

    groups = group_trials(feasible)
    pts = np.array([g.first.values for g in groups], dtype=float)
    maximise = [d == "maximize" for d in directions]
    mask = np.asarray(moocore.is_nondominated(pts, maximise=maximise, keep_weakly=True))
    front = [g for g, keep in zip(groups, mask, strict=True) if keep]
    sign = -1.0 if maximise[0] else 1.0
    front.sort(key=lambda g: (sign * g.first.values[0], g.first.number))
    return [t for g in front for t in g.trials]


_FRONTS: weakref.WeakKeyDictionary[Any, tuple[int, list[FrozenTrial]]] = weakref.WeakKeyDictionary()


def pareto_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The feasible non-dominated trials in the study directions, best first objective first.

    A report asks for the front several times (table, CSV, plots): it is computed once per
    study object and number of trials.
    """
    trials = study.get_trials(deepcopy=False)
    cached = _FRONTS.get(study)
    if cached is not None and cached[0] == len(trials):
        return list(cached[1])
    front = pareto_of(trials, [d for _, d in objectives(study)])
    _FRONTS[study] = (len(trials), front)
    return list(front)


# --------------------------------------------------------------------------- same values
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
            return _short(self.first.params.get(knob, "-"))
        return "any of " + ", ".join("-" if v is None else _short(v) for v in choices)


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


# --------------------------------------------------------------------------- tables
def trials_frame(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per trial (every state), every knob, objective, constraint and metric.

    Columns: ``number, state, feasible, pareto, infeasible_reason``, ``params.<knob>``,
    ``objective.<metric>``, ``constraint.<metric><op><value>``, ``metrics.<name>``, then
    ``seed, config_hash, wall_s, datetime_start, datetime_complete, config``. Every row has
    every column (``None`` where a trial lacks a value).
    """
    trials = study.get_trials(deepcopy=False)
    on_front = {t.number for t in pareto_trials(study)}
    objs = [m for m, _ in objectives(study)]
    cons = _constraint_names(study)
    knobs = sorted({k for t in trials for k in t.params})
    metric_cols: dict[str, None] = {}
    for t in trials:
        metric_cols.update(dict.fromkeys(t.user_attrs.get("metrics") or {}))
    rows = []
    for t in trials:
        u, metrics = t.user_attrs, t.user_attrs.get("metrics") or {}
        values = list(t.values or [None] * len(objs))
        c_vals = list(t.system_attrs.get("constraints") or [None] * len(cons))
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "feasible": is_feasible(t),
            "pareto": t.number in on_front,
            "infeasible_reason": u.get("infeasible_reason") or t.system_attrs.get("fail_reason"),
        }
        row.update({f"params.{k}": t.params.get(k) for k in knobs})
        row.update({f"objective.{m}": v for m, v in zip(objs, values, strict=False)})
        row.update({f"constraint.{c}": v for c, v in zip(cons, c_vals, strict=False)})
        row.update({f"metrics.{m}": metrics.get(m) for m in metric_cols})
        row.update({k: u.get(k) for k in ("seed", "config_hash", "wall_s")})
        row["datetime_start"] = t.datetime_start.isoformat() if t.datetime_start else None
        row["datetime_complete"] = t.datetime_complete.isoformat() if t.datetime_complete else None
        row["config"] = json.dumps(u["config"], sort_keys=True) if u.get("config") else None
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


def pareto_groups(study: optuna.Study) -> list[TrialGroup]:
    """The Pareto front with configs of the same objective values grouped, best first."""
    return group_trials(pareto_trials(study))


def pareto_table(study: optuna.Study) -> Table:
    """The Pareto front as a rich table: one row per distinct objective vector.

    Columns: the representative trial, how many configs share its values (when any do), the
    knobs that differ on the front (``any of ...`` where the configs of a row differ),
    objectives with units, and the SLO values of the representative.
    """
    from rich.table import Table

    front = pareto_trials(study)
    groups = group_trials(front)
    objs = objectives(study)
    slos = slo_constraints(study)
    varying, fixed = varying_knobs(front) if front else ([], {})
    if len(groups) == 1:
        varying, fixed = sorted({k for t in front for k in t.params}), {}
    n_feasible = sum(is_feasible(t) for t in study.get_trials(deepcopy=False))
    grouped = len(groups) < len(front)
    points = f"{len(groups)} points ({len(front)} configs)" if grouped else str(len(front))
    table = Table(title=f"Pareto front of {study.study_name}: {points} of {n_feasible} "
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
    slo_cols = [c for c in slos if c.metric not in {m for m, _ in objs}]
    for c in slo_cols:
        label = metric_label(c.metric, unit=False)
        table.add_column(constraint_label(c).replace(f"{label} ", f"{label}\n"), justify="right")
    for g in groups:
        t = g.first
        metrics = t.user_attrs.get("metrics") or {}
        cells = [str(t.number), *([str(len(g))] if grouped else []),
                 *(g.knob_cell(k) for k in varying)]  # fmt: skip
        cells += [format_value(m, v) for (m, _), v in zip(objs, t.values, strict=True)]
        for c in slo_cols:
            ok = c.violation(metrics) <= 0
            mark = "[green]✓[/green]" if ok else "[red]✗[/red]"
            cells.append(f"{format_value(c.metric, metrics.get(c.metric))} {mark}")
        table.add_row(*cells)
    return table


# --------------------------------------------------------------------------- best per SLO
def default_slo_sets(study: optuna.Study) -> list[SloSet]:
    """The study's SLOs, then a TTFT ladder (500/1000/2000 ms) keeping the other SLOs.

    The ladder uses the TTFT statistic the study constrains, else ``time_to_first_token.p90``
    when the trials report it. A capacity study has no ladder: each trial was measured at the
    load where its own SLO just holds, so a tighter TTFT is a question for another study.
    """
    slos = slo_constraints(study)
    label = ", ".join(constraint_label(c) for c in slos) or "no SLO"
    sets = [SloSet(f"study SLOs ({label})" if slos else label, tuple(slos))]
    load = (study.user_attrs.get("study") or {}).get("load") or {}
    if load.get("mode") == "capacity":
        return sets
    ttft = [c for c in slos if c.metric.startswith("time_to_first_token.") and c.op == "<="]
    metric = ttft[0].metric if ttft else "time_to_first_token.p90"
    reported = any(
        metric in (t.user_attrs.get("metrics") or {}) for t in study.get_trials(deepcopy=False)
    )
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
    study: optuna.Study, slos: Sequence[SloSet] | None = None
) -> list[tuple[SloSet, FrozenTrial | None]]:
    """For each SLO set, the trial meeting it that is best in the first objective.

    Ties on the first objective go to the next objectives, then to the lowest trial number.

    Args:
        study: A loaded study.
        slos: SLO sets to answer; :func:`default_slo_sets` when ``None``.

    Returns:
        ``(slo_set, trial or None)`` in the order of ``slos``.
    """
    return [(s, g.first if g else None) for s, g in best_groups_per_slo(study, slos)]


def best_groups_per_slo(
    study: optuna.Study, slos: Sequence[SloSet] | None = None
) -> list[tuple[SloSet, TrialGroup | None]]:
    """Like :func:`best_per_slo`, with every config meeting the set that ties with the best.

    Returns:
        ``(slo_set, group or None)``; the group's first trial is :func:`best_per_slo`'s answer.
    """
    sets = default_slo_sets(study) if slos is None else list(slos)
    objs = objectives(study)
    signs = [-1.0 if d == "maximize" else 1.0 for _, d in objs]
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


def best_lines(study: optuna.Study, slos: Sequence[SloSet] | None = None) -> list[str]:
    """Per SLO set: the best trial and its objectives with units, then (indented) its knobs.

    When other configs meeting the set have the same objective values, the line says how many
    and the knobs they differ in follow as ``knob: any of a, b``.
    """
    objs = objectives(study)
    lines = []
    for s, g in best_groups_per_slo(study, slos):
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
        fixed = {k: v for k, v in t.params.items() if k not in any_of}
        text = f"{s.label}: trial #{t.number}{same}: {vals}\n    {knobs_text(fixed)}"
        for k in any_of:
            text += f"\n    {k}: {g.knob_cell(k)}"
        lines.append(text)
    return lines


# --------------------------------------------------------------------------- I/O
def load_study(storage_url: str, name: str) -> optuna.Study:
    """Load study ``name`` from a storage URL or journal file path (never creates one).

    Raises:
        DynosimError: The storage file does not exist, or holds no study called ``name``.
    """
    import optuna

    from search.storage import open_storage, study_names

    if "://" not in storage_url or storage_url.startswith("sqlite:///"):
        raw = storage_url.removeprefix("sqlite:///").removeprefix("journal:")
        path = Path(raw).expanduser()
        if not path.is_file():
            raise DynosimError(f"no storage file at {path}")
    storage = open_storage(storage_url)
    names = study_names(storage)
    if name not in names:
        present = ", ".join(sorted(names)) or "none"
        raise DynosimError(f"no study {name!r} in {storage_url} (studies: {present})")
    return optuna.load_study(study_name=name, storage=storage)


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


def write_report(
    study: optuna.Study, out_dir: str | Path, *, importances: Sequence[Any] | None = None
) -> dict[str, Path]:
    """Write ``trials.csv``, ``pareto.csv`` and the plots: Pareto, convergence, importance.

    ``importances``: the study's :func:`search.importance.knob_importances`, when the caller
    has them already (they are computed otherwise).

    Returns:
        Paths keyed ``trials_csv``, ``pareto_csv``, ``pareto_html``, ``convergence_html``,
        ``importance_html``.
    """
    from search import importance, plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = trials_frame(study)
    front = pareto_rows(study, rows)
    columns = ["number", "configs", "group_trials", *list(rows[0])[1:]] if rows else None
    return {
        "trials_csv": write_csv(rows, out / "trials.csv"),
        "pareto_csv": write_csv(front, out / "pareto.csv", columns),
        "pareto_html": plots.write_html(
            plots.pareto_figures(study), out / "pareto.html", f"{study.study_name}: Pareto front"
        ),
        "convergence_html": plots.write_html(
            [plots.convergence_figure(study)],
            out / "convergence.html",
            f"{study.study_name}: convergence",
        ),
        "importance_html": plots.write_html(
            [
                importance.importance_figure(
                    study.study_name,
                    list(importances)
                    if importances is not None
                    else importance.knob_importances(study),
                )
            ],
            out / "importance.html",
            f"{study.study_name}: knob importance",
        ),
    }
