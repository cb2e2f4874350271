"""Workloads: trace readers, synthetic generators and transforms, all producing ``Request`` lists.

Every function returns requests with ids 0..n-1 in order of position and ``after_id < id``.
"""

from dynosim.workload.client import BenchmarkClient, ClientWorkload, client_requests
from dynosim.workload.files import TraceRef, load_workload_file, parse_workload_file
from dynosim.workload.generate import generate
from dynosim.workload.spec import ArrivalSpec, LengthSpec, PrefixSpec, SessionSpec, WorkloadSpec
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
