# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of studies_listing (issue 22 moved it)."""

from search.results.tables import studies_table

__all__ = ["studies_table"]
