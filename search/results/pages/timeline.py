"""The timeline of one simulation as an interactive plotly page (``dynosim simulate --timeline``).

Four panels share the time axis: each pool's provisioned and active workers (a planner's
scale-ups show as provisioned rising ``startup_s`` before active), the requests waiting in each
pool, the TTFT of every request at its arrival time (with the p90 of each sampling interval), and
each pool's KV-cache usage. The HTML embeds plotly.js, so it opens offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dynosim.simulation import SimResult

_COLORS = {"agg": "#1f77b4", "prefill": "#ff7f0e", "decode": "#2ca02c"}


def timeline_figure(result: SimResult, *, title: str) -> Any:
    """The figure of ``result``'s timeline (its metrics must carry one)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    timeline = result.metrics.timeline or {}
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        subplot_titles=("workers", "waiting requests", "time to first token", "KV-cache usage"),
    )
    for pool, cols in timeline.items():
        color = _COLORS.get(pool)
        t = cols["t_s"]
        fig.add_trace(
            go.Scatter(x=t, y=cols["provisioned_workers"], name=f"{pool}: provisioned",
                       line={"shape": "hv", "color": color}, legendgroup=pool),
            row=1, col=1,
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(x=t, y=cols["active_workers"], name=f"{pool}: active",
                       line={"shape": "hv", "color": color, "dash": "dot"}, legendgroup=pool),
            row=1, col=1,
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(x=t, y=cols["waiting"], name=f"{pool}: waiting",
                       line={"color": color}, legendgroup=pool, showlegend=False),
            row=2, col=1,
        )  # fmt: skip
        fig.add_trace(
            go.Scatter(x=t, y=cols["kv_usage"], name=f"{pool}: KV usage",
                       line={"color": color}, legendgroup=pool, showlegend=False),
            row=4, col=1,
        )  # fmt: skip
    rec = result.records
    done = rec.first_token_us >= 0
    arrival_s = rec.arrival_us[done] / 1e6
    ttft_ms = (rec.first_token_us[done] - rec.arrival_us[done]) / 1e3
    fig.add_trace(
        go.Scattergl(x=arrival_s, y=ttft_ms, mode="markers", name="TTFT (per request)",
                     marker={"size": 3, "color": "#7f7f7f", "opacity": 0.5}),
        row=3, col=1,
    )  # fmt: skip
    edges, p90 = _interval_p90(arrival_s, ttft_ms, timeline)
    if edges.size:
        fig.add_trace(
            go.Scatter(x=edges, y=p90, name="TTFT p90 per interval",
                       line={"shape": "hv", "color": "#d62728"}),
            row=3, col=1,
        )  # fmt: skip
    fig.update_yaxes(title_text="workers", row=1, col=1)
    fig.update_yaxes(title_text="requests", row=2, col=1)
    fig.update_yaxes(title_text="ms", row=3, col=1)
    fig.update_yaxes(title_text="fraction", range=[0, 1.02], row=4, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=4, col=1)
    m = result.metrics
    fig.update_layout(
        title=f"{title}: {m.gpus:.2f} GPUs on average, {m.scaling_events} scaling events",
        height=1000,
        template="plotly_white",
    )
    return fig


def _interval_p90(
    arrival_s: np.ndarray, ttft_ms: np.ndarray, timeline: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """p90 TTFT of the requests arriving in each sampling interval (empty intervals skipped)."""
    first: dict[str, Any] = next(iter(timeline.values()), {}) if timeline else {}
    times = first.get("t_s", [])
    if len(times) < 2 or arrival_s.size == 0:
        return np.zeros(0), np.zeros(0)
    edges = np.asarray(times, dtype=np.float64)
    # at most ~500 bins, so a long run's line stays readable
    step = max(1, edges.size // 500)
    edges = edges[::step]
    which = np.searchsorted(edges, arrival_s, side="right") - 1
    xs, ys = [], []
    for b in np.unique(which[which >= 0]):
        xs.append(edges[b])
        ys.append(float(np.percentile(ttft_ms[which == b], 90)))
    return np.array(xs), np.array(ys)


def write_timeline(result: SimResult, path: Path, *, title: str) -> None:
    """Write the timeline page of ``result`` to ``path``."""
    fig = timeline_figure(result, title=title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
