# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of convergence (issue 22 moved it)."""

from search.results.hypervolume import REFERENCE, HypervolumeTracker

__all__ = ["REFERENCE", "HypervolumeTracker"]
