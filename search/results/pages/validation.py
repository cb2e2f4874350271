"""Measured vs simulated for ``dynosim validate --html``: one panel per metric, a point per row.

Points are coloured by group (model, system, backend); hovering shows the row (file and line,
TP, ISL/OSL, concurrency, client) and both values. The diagonal is a perfect simulator; the
dotted lines are +-20%. The HTML embeds plotly.js, so it opens offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def validation_figure(groups: list[Any], *, title: str) -> Any:
    """The figure of ``validate``'s groups (rows refused are left out)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT (ms)"))
    top = {1: 1.0, 2: 1.0}
    for g in groups:
        run = [r for r in g.rows if r.refused is None]
        if not run:
            continue
        name = " / ".join(g.key[:3])
        hover = [
            f"{r.m.where}<br>TP{r.m.tp}, ISL {r.m.isl}, OSL {r.m.osl}, c={r.m.concurrency}, "
            f"client {r.m.client or 'closed loop'}<br>TTFT measured {r.m.ttft_ms:,.1f}, "
            f"simulated {r.ttft_ms:,.1f}<br>TPOT measured {r.m.tpot_ms:,.2f}, "
            f"simulated {r.tpot_ms:,.2f}"
            for r in run
        ]
        panels = ((1, [r.m.ttft_ms for r in run], [r.ttft_ms for r in run]),
                  (2, [r.m.tpot_ms for r in run], [r.tpot_ms for r in run]))  # fmt: skip
        for col, real, sim in panels:
            top[col] = max(top[col], *real, *sim)
            fig.add_trace(
                go.Scatter(x=real, y=sim, mode="markers", name=name, legendgroup=name,
                           showlegend=col == 1, text=hover, hoverinfo="text",
                           marker={"size": 6, "opacity": 0.7}),
                row=1, col=col,
            )  # fmt: skip
    for col in (1, 2):
        hi = top[col] * 1.05
        for k, dash, label in ((1.0, "solid", "simulated = measured"), (1.2, "dot", "±20%"),
                               (1 / 1.2, "dot", "±20%")):  # fmt: skip
            fig.add_trace(
                go.Scatter(x=[0, hi], y=[0, hi * k], mode="lines", name=label, legendgroup=label,
                           showlegend=col == 1 and k >= 1.0, hoverinfo="skip",
                           line={"color": "#999", "dash": dash, "width": 1}),
                row=1, col=col,
            )  # fmt: skip
        fig.update_xaxes(title_text="measured", row=1, col=col)
        fig.update_yaxes(title_text="simulated", row=1, col=col)
    fig.update_layout(title=title, height=560, template="plotly_white")
    return fig


def write_validation(groups: list[Any], path: Path, *, title: str) -> None:
    """Write the page to ``path``."""
    fig = validation_figure(groups, title=title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs=True, full_html=True)
