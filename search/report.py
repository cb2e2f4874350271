# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of report (issue 22 moved it)."""

from search.results.best import best_lines
from search.results.labels import constraint_label, metric_label
from search.results.tables import pareto_table
from search.results.write import write_report
from search.store.open import load_study
from search.store.schema import is_feasible, slo_constraints
from search.store.schema import study_objectives as objectives

__all__ = ["best_lines", "constraint_label", "is_feasible", "load_study", "metric_label",
           "objectives", "pareto_table", "slo_constraints", "write_report"]  # fmt: skip
