"""One self-contained HTML page of plotly figures (plotly.js embedded once, no CDN)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go


def write_html(figs: Sequence[go.Figure], path: Path, title: str) -> Path:
    """Write figures into one self-contained HTML page (plotly.js embedded once, no CDN)."""
    from plotly.offline import get_plotlyjs

    body = "\n".join(f.to_html(full_html=False, include_plotlyjs=False) for f in figs)
    page = (
        '<!DOCTYPE html>\n<html>\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n"
        '<script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: "local"};</script>\n'
        f'<script type="text/javascript">{get_plotlyjs()}</script>\n'
        f"</head>\n<body>\n{body}\n</body>\n</html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path
