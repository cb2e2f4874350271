"""The timeline of one simulation as an interactive plotly page (``dynosim simulate --timeline``).

Five panels share the time axis: each pool's provisioned and active workers (a planner's
scale-ups show as provisioned rising ``startup_s`` before active), the requests waiting in each
pool, the TTFT and the inter-token latency of every request at its arrival time (with the p90 of
each sampling interval and the deployment's SLO), and each pool's KV-cache usage. A request's
ITL is its mean gap between output tokens, ``(finish - first token) / (output tokens - 1)``, as
the metrics' ``inter_token_latency`` takes it. The HTML embeds plotly.js, so it opens offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from dynosim.config import SLOConfig
    from dynosim.simulation import SimResult

_COLORS = {"agg": "#1f77b4", "prefill": "#ff7f0e", "decode": "#2ca02c"}


def timeline_figure(result: SimResult, *, title: str, slo: SLOConfig | None = None) -> Any:
    """The figure of ``result``'s timeline (its metrics must carry one); ``slo``: lines drawn."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    timeline = result.metrics.timeline or {}
    fig = make_subplots(
        rows=5,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.04,
        subplot_titles=("workers", "waiting requests", "time to first token",
                        "inter-token latency", "KV-cache usage"),
    )  # fmt: skip
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
            row=5, col=1,
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
    itl_at, itl = request_itl_ms(rec)
    fig.add_trace(
        go.Scattergl(x=itl_at, y=itl, mode="markers", name="ITL (per request)",
                     marker={"size": 3, "color": "#8c564b", "opacity": 0.5}),
        row=4, col=1,
    )  # fmt: skip
    edges, p90 = _interval_p90(itl_at, itl, timeline)
    if edges.size:
        fig.add_trace(
            go.Scatter(x=edges, y=p90, name="ITL p90 per interval",
                       line={"shape": "hv", "color": "#9467bd"}),
            row=4, col=1,
        )  # fmt: skip
    targets = () if slo is None else ((3, slo.ttft_ms, "TTFT"), (4, slo.itl_ms, "ITL"))
    for row, target, what in targets:
        if target is not None:
            fig.add_hline(y=target, line={"dash": "dash", "color": "#000000", "width": 1},
                          annotation_text=f"{what} SLO {target:g} ms", row=row, col=1)  # fmt: skip
    fig.update_yaxes(title_text="workers", row=1, col=1)
    fig.update_yaxes(title_text="requests", row=2, col=1)
    fig.update_yaxes(title_text="ms", row=3, col=1)
    fig.update_yaxes(title_text="ms", row=4, col=1)
    fig.update_yaxes(title_text="fraction", range=[0, 1.02], row=5, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=5, col=1)
    if result.metrics.scaling_events:
        fig.add_annotation(text=PLANNER_NOTE, xref="paper", yref="paper", x=0, y=-0.06,
                           showarrow=False, align="left", font={"size": 11})  # fmt: skip
    m = result.metrics
    fig.update_layout(
        title=f"{title}: {m.gpus:.2f} GPUs on average, {m.scaling_events} scaling events",
        height=1200,
        template="plotly_white",
    )
    return fig


PLANNER_NOTE = (
    "provisioned: a worker counts (and is paid for) from the planner's decision; active: from "
    "startup_s later, when it takes traffic.<br>A pool with a worker still starting is not "
    "adjusted (Dynamo's planner blocks adjustment while a pool scales), so the first decision "
    "after a start<br>sees the load the new workers absorbed and may release them at once "
    "(dynosim/cluster/planner.py; README 'Autoscaling: the planner')."
)
"""Why provisioned workers can rise and fall around a start (drawn when the planner acted)."""


def request_itl_ms(rec: Any) -> tuple[np.ndarray, np.ndarray]:
    """Arrival time (s) and mean inter-token latency (ms) of each request with >= 2 tokens."""
    ok = (rec.first_token_us >= 0) & (rec.finish_us >= 0) & (rec.output_tokens >= 2)
    gaps = (rec.finish_us[ok] - rec.first_token_us[ok]) / (rec.output_tokens[ok] - 1)
    return rec.arrival_us[ok] / 1e6, gaps / 1e3


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


def write_timeline(
    result: SimResult, path: Path, *, title: str, slo: SLOConfig | None = None
) -> None:
    """Write the timeline page of ``result`` to ``path``."""
    fig = timeline_figure(result, title=title, slo=slo)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
