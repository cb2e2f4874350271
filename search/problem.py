# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of problem (issue 22 moved it)."""

from search.study.objectives import Constraint, metric_names
from search.trial import params_key

__all__ = ["Constraint", "metric_names", "params_key"]
