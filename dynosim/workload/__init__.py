"""Workloads: trace readers, synthetic generators and transforms, all producing ``Request`` lists.

Every function returns requests with ids 0..n-1 in order of position and ``after_id < id``.

Benchmark clients, workload files and the synthetic workload's spec are imported on first use
(:func:`__getattr__`): replaying a trace (``dynosim simulate --trace``) does not need them (16 kB
of source to compile; the spec's 5 dataclasses alone cost about 3 ms to build). The generator
stays eager: importing its submodule would otherwise replace the package's ``generate``
function with the module of that name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dynosim.workload.generate import generate
from dynosim.workload.traces import Workload, load_trace, load_trace_workload
from dynosim.workload.transforms import head, sample, select, speedup, time_slice

if TYPE_CHECKING:
    from dynosim.workload.client import BenchmarkClient, ClientWorkload, client_requests
    from dynosim.workload.files import TraceRef, load_workload_file, parse_workload_file
    from dynosim.workload.spec import (
        ArrivalSpec,
        LengthSpec,
        PrefixSpec,
        SessionSpec,
        WorkloadSpec,
    )

_LAZY = {
    "ArrivalSpec": "spec",
    "LengthSpec": "spec",
    "PrefixSpec": "spec",
    "SessionSpec": "spec",
    "WorkloadSpec": "spec",
    "BenchmarkClient": "client",
    "ClientWorkload": "client",
    "client_requests": "client",
    "TraceRef": "files",
    "load_workload_file": "files",
    "parse_workload_file": "files",
}
"""Name -> the submodule that defines it, for the names imported on first use."""

__all__ = [
    "ArrivalSpec",
    "BenchmarkClient",
    "ClientWorkload",
    "LengthSpec",
    "PrefixSpec",
    "SessionSpec",
    "TraceRef",
    "Workload",
    "WorkloadSpec",
    "client_requests",
    "generate",
    "head",
    "load_trace",
    "load_trace_workload",
    "load_workload_file",
    "parse_workload_file",
    "sample",
    "select",
    "speedup",
    "time_slice",
]


def __getattr__(name: str) -> object:
    """Import the submodule that defines ``name`` (see :data:`_LAZY`) and return ``name``."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly next time
    return value
