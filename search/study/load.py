"""Load as a study dimension: fixed | capacity | sweep, and the load axis of a workload.

A study's ``load:`` section says at what load each configuration is judged::

    load: {mode: fixed}                      # the workload as given (the default)
    load: {mode: capacity, tolerance: 0.05}  # the highest load at which every SLO holds
    load: {mode: sweep, levels: [8, 16, 32, 64]}   # every config at every level

The *load axis* follows from the workload: a trace is replayed faster or slower (the level is
the speed-up over the trace's own timestamps, ``workload.speedup`` being the trace's level), an
open-loop synthetic workload (poisson, gamma, constant) gets another ``rate_rps``, a closed-loop
one another client ``concurrency`` (an integer). Everything else about the workload — lengths,
prefixes, sessions, its seed — stays, so the levels of one workload are coupled: the same
requests, sent faster. The capacity search itself is :mod:`search.run.capacity`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dynosim.checks import choice, flag, integer, number
from dynosim.errors import ConfigError
from search.study.sections import WorkloadRef, workload_ref

if TYPE_CHECKING:
    from dynosim.workload import BenchmarkClient, WorkloadSpec

Mode = Literal["fixed", "capacity", "sweep"]
AxisKind = Literal["speedup", "rate_rps", "concurrency"]
LEVEL_KNOB = "load.level"
"""The knob a sweep adds to the space: the load level of a (config, level) point."""
LOAD_METRICS = (
    "load_level",
    "capacity_rps",
    "capacity_rps_per_gpu",
    "capacity_output_tokens_per_s_per_gpu",
    "capacity_at_limit",
    "capacity_probes",
    "capacity_simulated_requests",
    "capacity_full_runs",
)
"""Metrics a load mode adds to a trial's simulator metrics."""
_KEYS = {"mode", "levels", "tolerance", "start", "min", "max", "early_stop", "max_probes"}
MIN_LEVEL, MAX_LEVEL = 1e-3, 100_000
"""Bounds of any load level (a speed-up, req/s or clients): a level of 1e-299 req/s puts the
second request beyond any simulated time, 10^7 clients holds 10^7 requests in flight."""
MIN_TOLERANCE = 1e-3
"""Narrowest capacity bracket (0.1 %): below a finite workload's run-to-run noise, and a
bracket of 1e-17 is below a float's resolution (the bisection could never close it)."""
MAX_LEVELS = 1_000
"""Most levels of a sweep (each is a simulation of every configuration)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSpec:
    """The ``load:`` section of a study file, validated.

    Attributes:
        mode: ``fixed`` (the workload as given), ``capacity`` or ``sweep``.
        levels: The sweep's levels (on the workload's axis), increasing.
        tolerance: Capacity: stop when the bracket is this narrow, relative (``hi/lo - 1``).
        start: Capacity: the first level tried (default: the workload's own).
        min: Capacity: the lowest level tried before declaring "no load meets the SLO"
            (default: the start / 64; 1 client for concurrency).
        max: Capacity: the highest level tried (default: the start x 64); a config still
            within its SLO there is reported at ``max`` with ``capacity_at_limit = 1``.
        early_stop: Stop hopeless simulations as soon as their SLO can no longer be met
            (default: on for capacity, off otherwise, where a stopped run's partial metrics
            would replace the full run's).
        max_probes: Capacity: most simulations per configuration.
    """

    mode: Mode = "fixed"
    levels: tuple[float, ...] = ()
    tolerance: float = 0.05
    start: float | None = None
    min: float | None = None
    max: float | None = None
    early_stop: bool | None = None
    max_probes: int = 24

    @property
    def stops_early(self) -> bool:
        """Whether simulations get an SLO monitor."""
        return self.mode == "capacity" if self.early_stop is None else self.early_stop

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "mode": self.mode, "levels": list(self.levels), "tolerance": self.tolerance,
            "start": self.start, "min": self.min, "max": self.max,
            "early_stop": self.early_stop, "max_probes": self.max_probes,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, raw: object, where: str = "load") -> LoadSpec:
        """Validate a ``load:`` mapping (``None`` = fixed).

        Raises:
            ConfigError: An unknown key or a bad value, naming ``where.key``.
        """
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError(where, raw, "a mapping {mode: fixed | capacity | sweep, ...}")
        for key in raw:
            if key not in _KEYS:
                raise ConfigError(f"{where}.{key}", raw[key], " | ".join(sorted(_KEYS)))
        mode = raw.get("mode", "fixed")
        choice(f"{where}.mode", mode, ("fixed", "capacity", "sweep"))
        levels = _levels(where, mode, raw)
        tol = raw.get("tolerance", 0.05)
        number(f"{where}.tolerance", tol, MIN_TOLERANCE, 1, open_high=True,
               why="a relative width of the capacity bracket")  # fmt: skip
        lo, hi, st = _limits(where, raw)
        early = raw.get("early_stop")
        if early is not None:
            flag(f"{where}.early_stop", early)
        probes = raw.get("max_probes", 24)
        integer(f"{where}.max_probes", probes, 2, 200)
        return cls(
            mode=mode,
            levels=tuple(float(v) for v in levels),
            tolerance=float(tol),
            start=None if st is None else float(st),
            min=None if lo is None else float(lo),
            max=None if hi is None else float(hi),
            early_stop=early,
            max_probes=probes,
        )


def _levels(where: str, mode: str, raw: Mapping[str, Any]) -> list[float]:
    levels = raw.get("levels") or []
    if mode != "sweep":
        if levels:
            raise ConfigError(f"{where}.levels", levels, "only with mode: sweep")
        return []
    if not isinstance(levels, list) or not levels or len(levels) > MAX_LEVELS:
        what = f"a non-empty list of at most {MAX_LEVELS:,} load levels"
        raise ConfigError(
            f"{where}.levels",
            f"{len(levels):,} levels" if isinstance(levels, list) else levels,
            what,
        )
    for i, v in enumerate(levels):
        number(f"{where}.levels[{i}]", v, MIN_LEVEL, MAX_LEVEL)
    if sorted(set(levels)) != list(levels):
        raise ConfigError(f"{where}.levels", levels, "distinct levels in increasing order")
    return [float(v) for v in levels]


def _limits(where: str, raw: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    bounds = {k: raw.get(k) for k in ("start", "min", "max")}
    for k, v in bounds.items():
        if v is not None:
            number(f"{where}.{k}", v, MIN_LEVEL, MAX_LEVEL)
    lo, hi, st = bounds["min"], bounds["max"], bounds["start"]
    if lo is not None and hi is not None and lo >= hi:
        raise ConfigError(f"{where}.max", hi, f"> load.min ({lo})")
    if st is not None and ((lo is not None and st < lo) or (hi is not None and st > hi)):
        raise ConfigError(f"{where}.start", st, "a level within [load.min, load.max]")
    return lo, hi, st


# ------------------------------------------------------------------------------ the axis
@dataclass(frozen=True, slots=True)
class LoadAxis:
    """How a load level becomes the requests of a simulation.

    Attributes:
        kind: ``speedup`` (trace replay rate), ``rate_rps`` or ``concurrency``.
        base: The workload's own level.
        spec: The synthetic spec to regenerate at other levels (``None`` for a trace).
        base_dir: Folder of the workload file (relative empirical traces).
    """

    kind: AxisKind
    base: float
    spec: WorkloadSpec | BenchmarkClient | None = None
    base_dir: str | None = None

    def snap(self, level: float) -> float:
        """The nearest level the axis can run (a whole number of clients for concurrency)."""
        return float(max(1, round(level))) if self.kind == "concurrency" else float(level)

    def unit(self) -> str:
        """How a level reads: ``x`` (speed-up), ``req/s`` or ``clients``."""
        return {"speedup": "x", "rate_rps": "req/s", "concurrency": "clients"}[self.kind]

    def workload_at(self, level: float, requests: Sequence[Any]) -> tuple[Sequence[Any], float]:
        """``(requests, speedup)`` to simulate at ``level``.

        A trace keeps its requests (given at its own timestamps) and is replayed ``level``
        times faster; a synthetic workload is regenerated at that rate or concurrency.
        """
        if self.kind == "speedup":
            return requests, float(level)
        from dynosim.workload import BenchmarkClient, client_requests, generate

        spec = self.spec
        if isinstance(spec, BenchmarkClient):  # the tool run at that many clients
            return tuple(client_requests(replace(spec, concurrency=round(level)))), 1.0
        assert spec is not None  # a synthetic workload (a trace has the speedup axis)
        arrival = spec.arrival
        if self.kind == "rate_rps":
            arrival = replace(arrival, rate_rps=float(level))
        else:
            arrival = replace(arrival, concurrency=round(level))
        return tuple(generate(replace(spec, arrival=arrival), base_dir=self.base_dir)), 1.0

    def warmup_at(self, level: float, default: int) -> int:
        """Warm-up requests at ``level``: a benchmark client's own count there, else ``default``.

        (A tool such as InferenceX scales its warm-ups with the clients: ``2 * c``.)
        """
        from dynosim.workload import BenchmarkClient

        if isinstance(self.spec, BenchmarkClient):
            return replace(self.spec, concurrency=round(level)).warmup_count
        return default


def load_axis(workload: WorkloadRef | Mapping[str, Any]) -> LoadAxis:
    """The load axis of a study's workload (``trace:`` or ``file:``; a mapping is read as one).

    Raises:
        WorkloadError: The workload file is malformed.
    """
    from dynosim.workload import ClientWorkload, TraceRef, parse_workload_file

    if isinstance(workload, Mapping):
        workload = workload_ref(workload)
    if workload.trace is not None:
        return LoadAxis("speedup", float(workload.speedup))
    assert workload.file is not None
    parsed = parse_workload_file(workload.file)
    if isinstance(parsed, TraceRef):
        return LoadAxis("speedup", float(parsed.speedup))
    if isinstance(parsed, ClientWorkload):
        return LoadAxis("concurrency", float(parsed.client.concurrency), parsed.client)
    arrival = parsed.arrival
    folder = str(Path(workload.file).parent)
    if arrival.process == "closed_loop":
        return LoadAxis("concurrency", float(arrival.concurrency), parsed, folder)
    return LoadAxis("rate_rps", float(arrival.rate_rps), parsed, folder)
