# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of space (issue 22 moved it)."""

from search.study.space import Knob, Params, Space, Value

__all__ = ["Knob", "Params", "Space", "Value"]
