# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of timeline_plot (issue 22 moved it)."""

from search.results.pages.timeline import write_timeline

__all__ = ["write_timeline"]
