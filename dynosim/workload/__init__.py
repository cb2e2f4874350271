"""Workloads: trace readers, synthetic generators and transforms, all producing ``Request`` lists.

Every function returns requests with ids 0..n-1 in order of position and ``after_id < id``.
"""

from dynosim.workload.client import BenchmarkClient, ClientWorkload, client_requests
from dynosim.workload.synthetic import (
    ArrivalSpec,
    LengthSpec,
    PrefixSpec,
    SessionSpec,
    TraceRef,
    WorkloadSpec,
    generate,
    load_workload_file,
    parse_workload_file,
)
from dynosim.workload.traces import Workload, load_trace, load_trace_workload
from dynosim.workload.transforms import head, sample, select, speedup, time_slice

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
