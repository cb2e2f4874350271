"""Interactive plotly figures of a study: Pareto front, objective matrix, convergence.

Every HTML file embeds plotly.js, so reports open offline and can be mailed as one file.
Points are trials, one point per set of configs with the same objective values
(``search.results.front.group_trials``); hovering shows the trial numbers, the objectives and key
metrics with units, and every knob (``any of`` where the configs of a point differ). Configs that
could not run (penalty values, no metrics) are not plotted.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from search.results.front import TrialGroup, group_trials, pareto_of
from search.results.hypervolume import recomputed_hypervolume
from search.results.importance import EVALUATOR, ObjectiveImportance, knob_order, objective_header
from search.results.judged import is_sweep
from search.results.labels import KEY_METRICS, format_value, metric_label
from search.store.schema import (
    HV_HISTORY,
    REASON,
    STATUS,
    is_feasible,
    is_runnable,
    study_objectives,
    trial_metrics,
)
from search.study.load import LEVEL_KNOB

if TYPE_CHECKING:
    import optuna
    import plotly.graph_objects as go
    from optuna.trial import FrozenTrial

FRONT_COLOR = "#d62728"
FEASIBLE_COLOR = "#1f77b4"
INFEASIBLE_COLOR = "#7f7f7f"


def hover_text(trial: FrozenTrial | TrialGroup, study_objectives: Sequence[tuple[str, str]]) -> str:
    """Hover label of a trial or a group of trials with the same objective values.

    Objectives, key metrics (of the group's first trial), knobs (``knob: any of a, b`` where
    the group's configs differ), and why it is infeasible.
    """
    group = trial if isinstance(trial, TrialGroup) else TrialGroup((trial,))
    first = group.first
    metrics = trial_metrics(first)
    head = f"<b>trial #{first.number}</b>"
    if len(group) > 1:
        others = ", ".join(f"#{n}" for n in group.numbers[1:9])
        more = ", ..." if len(group) > 9 else ""
        head += f" = {others}{more} ({len(group)} configs, same objective values)"
    lines = [head]
    shown = set()
    for (m, _), v in zip(study_objectives, first.values or (), strict=False):
        lines.append(f"{metric_label(m)}: {format_value(m, v)}")
        shown.add(m)
    lines += [
        f"{metric_label(m)}: {format_value(m, metrics[m])}"
        for m in KEY_METRICS
        if m in metrics and m not in shown
    ]
    lines.append("—")
    any_of = group.any_of()
    lines += [f"{k}={v}" for k, v in sorted(first.params.items()) if k not in any_of]
    lines += [f"{k}: {html.escape(group.knob_cell(k))}" for k in any_of]
    if not is_feasible(first):
        reason = first.user_attrs.get(REASON) or "constraint violated"
        lines.append(f"<i>infeasible: {html.escape(str(reason))}</i>")
    return "<br>".join(lines)


def _groups(
    study: optuna.Study, trials: Sequence[Any] | None = None
) -> tuple[list[Any], list[Any], list[Any], int]:
    """(Pareto, other feasible, runnable-but-infeasible) trials and the count not runnable.

    ``trials`` (default: all) narrows the study, e.g. to one load level of a sweep.
    """
    if trials is None:
        trials = study.get_trials(deepcopy=False)
    front = pareto_of(trials, [d.name.lower() for d in study.directions])
    on_front = {t.number for t in front}
    feasible = [t for t in trials if is_feasible(t) and t.number not in on_front]
    infeasible = [t for t in trials if is_runnable(t) and not is_feasible(t)]
    not_run = sum(1 for t in trials if t.values and not is_runnable(t) and not is_feasible(t))
    return front, feasible, infeasible, not_run


def _axis(metric: str, direction: str) -> str:
    return f"{metric_label(metric)} {'↑ better' if direction == 'maximize' else '↓ better'}"


def pareto_figures(study: optuna.Study) -> list[go.Figure]:
    """The Pareto scatter of the first two objectives, plus a scatter matrix for 3+.

    A sweep gets one scatter per load level (load is the user's situation, not a knob).
    """
    figs = []
    if is_sweep(study):
        trials = study.get_trials(deepcopy=False)
        levels = sorted({float(t.params[LEVEL_KNOB]) for t in trials if LEVEL_KNOB in t.params})
        for level in levels:
            at = [t for t in trials if float(t.params.get(LEVEL_KNOB, -1)) == level]
            figs.append(pareto_scatter(study, at, f" at load level {level:g}"))
    else:
        figs.append(pareto_scatter(study))
    if len(study.directions) >= 3:
        figs.append(objective_matrix(study))
    return figs


def pareto_scatter(
    study: optuna.Study, trials: Sequence[Any] | None = None, tag: str = ""
) -> go.Figure:
    """All trials faded, infeasible ones as crosses, the feasible front highlighted and joined.

    With one objective the x axis is the trial number.
    """
    import plotly.graph_objects as go

    objs = study_objectives(study)
    front, feasible, infeasible, not_run = _groups(study, trials)
    one = len(objs) == 1

    def xy(groups: Sequence[TrialGroup]) -> tuple[list[float], list[float]]:
        if one:
            return [g.first.number for g in groups], [g.first.values[0] for g in groups]
        return [g.first.values[0] for g in groups], [g.first.values[1] for g in groups]

    fig = go.Figure()
    styles = (
        ("infeasible (SLO violated)", infeasible, INFEASIBLE_COLOR, "x", 0.45, "markers"),
        ("feasible", feasible, FEASIBLE_COLOR, "circle", 0.35, "markers"),
        ("Pareto front", front, FRONT_COLOR, "diamond", 1.0, "lines+markers"),
    )
    for name, members, color, symbol, opacity, mode in styles:
        groups = group_trials(members)
        x, y = xy(groups)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode=mode if not one else "markers",
                name=f"{name} ({len(members)})",
                marker={"color": color, "symbol": symbol, "size": 10 if opacity == 1 else 7},
                line={"color": color, "width": 1.5},
                opacity=opacity,
                text=[hover_text(g, objs) for g in groups],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    note = f"; {not_run} configs could not run (not shown)" if not_run else ""
    n_points = len(group_trials(front))
    size = f"{n_points} points, {len(front)} configs" if n_points < len(front) else (
        f"{len(front)} configs")  # fmt: skip
    fig.update_layout(
        title=f"{study.study_name}{tag}: Pareto front ({size}){note}",
        xaxis_title="trial" if one else _axis(*objs[0]),
        yaxis_title=_axis(*objs[0 if one else 1]),
        hovermode="closest",
        template="plotly_white",
        legend={"orientation": "h", "y": -0.15},
    )
    return fig


def objective_matrix(study: optuna.Study) -> go.Figure:
    """Scatter matrix of every objective: feasible trials faded, the Pareto front highlighted."""
    import plotly.graph_objects as go

    objs = study_objectives(study)
    front, feasible, _, _ = _groups(study)
    fig = go.Figure()
    for name, trials, color, opacity in (
        ("feasible", feasible, FEASIBLE_COLOR, 0.35),
        ("Pareto front", front, FRONT_COLOR, 1.0),
    ):
        groups = group_trials(trials)
        dims = [
            {"label": metric_label(m), "values": [g.first.values[i] for g in groups]}
            for i, (m, _) in enumerate(objs)
        ]
        fig.add_trace(
            go.Splom(
                dimensions=dims,
                name=f"{name} ({len(trials)})",
                marker={"color": color, "size": 6, "opacity": opacity},
                text=[hover_text(g, objs) for g in groups],
                hovertemplate="%{text}<extra></extra>",
                diagonal_visible=False,
            )
        )
    fig.update_layout(
        title=f"{study.study_name}: all objectives (feasible trials)",
        template="plotly_white",
        height=250 * len(objs),
        width=250 * len(objs) + 150,
    )
    return fig


def convergence_figure(study: optuna.Study) -> go.Figure:
    """Hypervolume vs trials (stored per generation, recomputed per trial) and best objective."""
    import optuna
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    objs = study_objectives(study)
    metric, direction = objs[0]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    history = study.user_attrs.get(HV_HISTORY) or []
    if history:
        fig.add_trace(
            go.Scatter(
                x=[h[0] for h in history],
                y=[h[1] for h in history],
                mode="lines+markers",
                name="hypervolume (stored, per generation)",
                line={"color": FRONT_COLOR},
            ),
            row=1,
            col=1,
        )
    x, hv = recomputed_hypervolume(study)
    fig.add_trace(
        go.Scatter(
            x=x,
            y=hv,
            mode="lines",
            line={"color": INFEASIBLE_COLOR, "dash": "dot", "shape": "hv"},
            name="hypervolume (recomputed per trial)",
        ),
        row=1,
        col=1,
    )
    done = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.COMPLETE
    ]
    done.sort(key=lambda t: t.number)
    sign = 1.0 if direction == "maximize" else -1.0
    xs, ys, bx, by, best = [], [], [], [], None
    for i, t in enumerate(done, start=1):
        if is_feasible(t):
            v = t.values[0]
            xs.append(i)
            ys.append(v)
            best = v if best is None or sign * v > sign * best else best
        if best is not None:
            bx.append(i)
            by.append(best)
    fig.add_trace(
        go.Scatter(x=xs, y=ys, mode="markers", name=f"feasible {metric_label(metric, unit=False)}",
                   marker={"color": FEASIBLE_COLOR, "size": 5}, opacity=0.4),
        row=2, col=1,
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=bx, y=by, mode="lines", name="best so far",
                   line={"color": FEASIBLE_COLOR, "shape": "hv"}),
        row=2, col=1,
    )  # fmt: skip
    status = study.user_attrs.get(STATUS, "-")
    fig.update_layout(
        title=f"{study.study_name}: convergence (status: {status})",
        template="plotly_white",
        hovermode="x unified",
        legend={"orientation": "h", "y": -0.12},
        height=700,
    )
    fig.update_yaxes(title_text="normalised hypervolume", row=1, col=1)
    fig.update_yaxes(title_text=_axis(metric, direction), row=2, col=1)
    fig.update_xaxes(title_text="completed trials", row=2, col=1)
    return fig


def importance_figure(study_name: str, importances: Sequence[ObjectiveImportance]) -> go.Figure:
    """Grouped bars: one group per objective, one bar per knob (share of importance in %).

    Objectives that could not be assessed are named, with why, in the title.
    """
    import plotly.graph_objects as go

    done = [imp for imp in importances if imp.shares]
    knobs = knob_order(done)
    fig = go.Figure()
    for k in knobs:
        shares = [100.0 * imp.shares.get(k, 0.0) for imp in done]
        fig.add_trace(
            go.Bar(
                x=[objective_header(imp) for imp in done],
                y=shares,
                name=k,
                text=[f"{s:.0f}%" for s in shares],
                textposition="outside",
                cliponaxis=False,
                hovertemplate=f"<b>{k}</b><br>%{{x}}: %{{y:.1f}}% of the importance<extra></extra>",
            )
        )
    n = max((imp.n_trials for imp in importances), default=0)
    notes = "; ".join(
        f"{objective_header(imp)}: {imp.note}" for imp in importances if not imp.shares
    )
    title = f"{study_name}: knob importance per objective ({EVALUATOR}, {n} runnable trials)"
    fig.update_layout(
        title=title + (f"<br><sup>{notes}</sup>" if notes else ""),
        barmode="group",
        template="plotly_white",
        yaxis_title="share of the objective's importance (%)",
        legend={"title": {"text": "knob"}},
    )
    if not done:
        fig.add_annotation(text=notes or "no objectives", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")  # fmt: skip
    return fig
