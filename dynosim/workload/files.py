"""Workload files: a synthetic spec, a trace reference or a benchmark client, read from YAML."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from dynosim.checks import integer, known_keys
from dynosim.errors import ConfigError, WorkloadError
from dynosim.files import parse_yaml, read_text, yaml_syntax_error
from dynosim.workload.client import BenchmarkClient, ClientWorkload
from dynosim.workload.generate import generate
from dynosim.workload.limits import MAX_REQUESTS, MEMORY_WHY, finite_in
from dynosim.workload.spec import WorkloadSpec
from dynosim.workload.traces import Workload, load_trace_workload

__all__ = ["TraceRef", "load_workload_file", "parse_workload_file"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceRef:
    """A workload file that points at a trace (``trace:`` plus optional replay settings)."""

    path: Path
    speedup: float = 1.0
    max_requests: int | None = None
    warmup_requests: int = 0
    name: str = "workload"

    def load(self) -> Workload:
        """Read the trace as the file describes."""
        loaded = load_trace_workload(
            self.path, speedup=self.speedup, max_requests=self.max_requests
        )
        return Workload(
            requests=loaded.requests, warmup_requests=self.warmup_requests, name=self.name
        )


def parse_workload_file(path: str | Path) -> WorkloadSpec | TraceRef | ClientWorkload:
    """Read and validate a workload YAML file without generating or reading any request.

    A trace reference has the keys ``trace`` (path, relative to the file's folder) and
    optionally ``speedup``, ``max_requests``, ``warmup_requests`` and ``name``. A benchmark
    client has the keys ``client`` (see :mod:`dynosim.workload.client`) and optionally
    ``name``. Anything else is a :class:`WorkloadSpec`; relative empirical trace paths are
    resolved against the file's folder. The name is the file's ``name`` or else its stem.

    Raises:
        WorkloadError: One line ``FILE: field: what is wrong`` (or ``FILE:LINE:`` for YAML
            syntax errors).
    """
    path = Path(path)
    try:
        data = parse_yaml(
            read_text(path, lambda p, why: WorkloadError(f"{p}: cannot read workload file: {why}"))
        )
    except yaml.YAMLError as exc:
        raise WorkloadError(yaml_syntax_error(path, exc)) from None
    named = isinstance(data, Mapping) and "name" in data
    try:
        if isinstance(data, Mapping) and "client" in data:
            known_keys("", data, ("client", "name"))
            return ClientWorkload(
                client=BenchmarkClient.from_dict(data["client"]),
                name=str(data["name"]) if named else path.stem,
            )
        if isinstance(data, Mapping) and "trace" in data:
            keys = ("trace", "speedup", "max_requests", "warmup_requests", "name")
            known_keys("", data, keys)
            integer(
                "warmup_requests", data.get("warmup_requests", 0), 0, MAX_REQUESTS, why=MEMORY_WHY
            )
            if data.get("max_requests") is not None:
                integer("max_requests", data["max_requests"], 1, MAX_REQUESTS, why=MEMORY_WHY)
            finite_in("speedup", data.get("speedup", 1.0), 0.0, open_low=True)
            if not isinstance(data["trace"], str) or not data["trace"] or "\x00" in data["trace"]:
                raise ConfigError("trace", data["trace"], "a trace file path")
            return TraceRef(
                path=path.parent / data["trace"],
                speedup=data.get("speedup", 1.0),
                max_requests=data.get("max_requests"),
                warmup_requests=data.get("warmup_requests", 0),
                name=str(data["name"]) if named else path.stem,
            )
        spec = WorkloadSpec.from_dict(data if data is not None else {}, base_dir=path.parent)
    except ConfigError as exc:
        raise WorkloadError(f"{path}: {exc}") from None
    return spec if named else replace(spec, name=path.stem)


def load_workload_file(path: str | Path) -> Workload:
    """Read a workload YAML file (see :func:`parse_workload_file`) and make its requests.

    Raises:
        WorkloadError: The file is malformed, or a trace line is (``FILE:LINE: what``).
    """
    parsed = parse_workload_file(path)
    if isinstance(parsed, TraceRef | ClientWorkload):
        try:
            return parsed.load()
        except ConfigError as exc:
            raise WorkloadError(f"{path}: {exc}") from None
    try:
        requests = generate(parsed, base_dir=Path(path).parent)
    except ConfigError as exc:
        raise WorkloadError(f"{path}: {exc}") from None
    return Workload(
        requests=tuple(requests), warmup_requests=parsed.warmup_requests, name=parsed.name
    )
