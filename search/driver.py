# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of driver (issue 22 moved it)."""

from search.run.driver import RunState, run_study
from search.study.workload import load_workload
from search.trial import workload_id

__all__ = ["RunState", "load_workload", "run_study", "workload_id"]
