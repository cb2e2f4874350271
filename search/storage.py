# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of storage (issue 22 moved it)."""

from search.results.counts import TrialCounts, trial_counts
from search.store.open import open_storage, study_names
from search.store.record import StudyRecord

__all__ = ["StudyRecord", "TrialCounts", "open_storage", "study_names", "trial_counts"]
