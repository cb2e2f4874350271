# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of validation_plot (issue 22 moved it)."""

from search.results.pages.validation import write_validation

__all__ = ["write_validation"]
