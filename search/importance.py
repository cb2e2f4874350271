# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of importance (issue 22 moved it)."""

from search.results.importance import knob_importances
from search.results.tables import importance_table

__all__ = ["importance_table", "knob_importances"]
