"""Reading a study's workload: the requests its trials simulate."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.study.load import LoadSpec
from search.study.sections import WorkloadRef, workload_ref

if TYPE_CHECKING:
    from dynosim.types import Request


def load_workload(
    spec: WorkloadRef | Mapping[str, Any], load: LoadSpec | None = None
) -> tuple[Sequence[Request], int, str]:
    """Load the study's workload: ``(requests, warmup_requests, name)``.

    With a capacity or sweep load, a trace is read at its own timestamps (the load axis
    replays it faster or slower); otherwise at the workload's ``speedup``. A mapping is read as
    a ``workload:`` section.
    """
    from dynosim.workload import ClientWorkload, TraceRef, load_trace_workload, parse_workload_file

    if isinstance(spec, Mapping):
        spec = workload_ref(spec)
    as_written = load is not None and load.mode != "fixed"
    if spec.trace is not None:
        w = load_trace_workload(
            spec.trace,
            speedup=1.0 if as_written else spec.speedup,
            max_requests=spec.max_requests,
        )
    else:
        assert spec.file is not None
        parsed = parse_workload_file(spec.file)
        if isinstance(parsed, TraceRef):
            w = (dataclasses.replace(parsed, speedup=1.0) if as_written else parsed).load()
        elif isinstance(parsed, ClientWorkload):
            w = parsed.load()
        else:
            from dynosim.workload import Workload, generate

            requests = generate(parsed, base_dir=Path(spec.file).parent)
            w = Workload(
                requests=tuple(requests), warmup_requests=parsed.warmup_requests, name=parsed.name
            )
    warmup = spec.warmup_requests
    return w.requests, int(w.warmup_requests if warmup is None else warmup), str(w.name)
