# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of study_file (issue 22 moved it)."""

from search.study.study_file import (
    DEFAULT_STORAGE,
    StudyFile,
    apply_overrides,
    load_study_file,
    parse_study,
)

__all__ = ["DEFAULT_STORAGE", "StudyFile", "apply_overrides", "load_study_file", "parse_study"]
