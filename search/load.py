# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of load (issue 22 moved it)."""

from search.run.capacity import Probe, find_capacity
from search.study.load import LEVEL_KNOB, LoadAxis, LoadSpec, load_axis

__all__ = ["LEVEL_KNOB", "LoadAxis", "LoadSpec", "Probe", "find_capacity", "load_axis"]
