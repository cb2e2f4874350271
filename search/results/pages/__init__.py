"""HTML pages of plotly figures (plotly is imported inside each function that draws)."""
