# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of evaluator (issue 22 moved it)."""

from search.run.evaluate import EvalContext, evaluate_one, prepare
from search.trial import TrialResult

__all__ = ["EvalContext", "TrialResult", "evaluate_one", "prepare"]
