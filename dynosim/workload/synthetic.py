"""Synthetic workloads: a validated spec (from a YAML-derived dict) and its generator.

A spec, as YAML::

    requests: 2000            # measured requests
    warmup_requests: 0        # extra leading requests, excluded from metrics
    arrival: {process: closed_loop, concurrency: 32, ramp_up_s: 0}
             # | {process: poisson, rate_rps: 8} | {process: gamma, rate_rps: 8, cv: 3}
             # | {process: constant, rate_rps: 8}
    input_tokens: {dist: fixed, value: 1024}
             # | {dist: uniform, low, high} | {dist: lognormal, mean, sigma[, max]}
             # | {dist: empirical, trace: FILE[, field: input | output]}
    output_tokens: {dist: fixed, value: 256}
    prefix: {groups: 8, tokens: 2048[, zipf_s: 1.1]}   # optional
    sessions: {turns: 3, think_time_s: 1.0}             # optional
    seed: 0
    name: my-workload                                   # optional

Semantics:

* ``warmup_requests + requests`` requests are generated; the first ``warmup_requests`` are
  warm-up. Lengths are integers clipped to >= 1.
* Open-loop arrivals (poisson, gamma with inter-arrival CV ``cv``, constant) start at 0 s.
  ``closed_loop``: unit ``k`` (a request, or a whole session with ``sessions``) is sent by client
  ``k % concurrency``; the first ``concurrency`` units arrive at ``ramp_up_s * c / concurrency``,
  later ones follow the client's previous request (``after_id``, no delay, ``arrival_s = 0``).
* ``prefix``: each session (or request) picks a group (uniformly, or Zipf with exponent
  ``zipf_s``); its prompt is the group's ``tokens``-token shared prefix followed by
  ``input_tokens`` more tokens. The prefix's full 512-token blocks have hash ids shared by the
  group.
* ``sessions``: requests come in sessions of ``turns`` (the last may be shorter); ids of a
  session are consecutive. Turn ``j > 0`` follows turn ``j - 1`` (``after_id``) after
  ``think_time_s``; its prompt is the previous prompt + previous output + ``input_tokens`` new
  tokens, so it repeats the hash ids of the previous prompt's full blocks. ``arrival_s`` of
  every turn is that of the session's first turn.
* Hash ids are unique per block except shared ones, counted from 0 per generated workload.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt
import yaml

from dynosim.errors import ConfigError, WorkloadError
from dynosim.files import parse_yaml, read_text, yaml_syntax_error
from dynosim.types import HASH_BLOCK_TOKENS, Request
from dynosim.workload.client import BenchmarkClient, ClientWorkload
from dynosim.workload.limits import (
    MAX_BLOCK_IDS,
    MAX_REQUESTS,
    MAX_TIME_S,
    MAX_TOKENS,
    MEMORY_WHY,
    REQUESTS_WHY,
    TIME_WHY,
    finite_number,
)
from dynosim.workload.traces import Workload, load_trace, load_trace_workload

__all__ = [
    "ArrivalSpec",
    "LengthSpec",
    "PrefixSpec",
    "SessionSpec",
    "TraceRef",
    "WorkloadSpec",
    "generate",
    "load_workload_file",
    "parse_workload_file",
]

Process = Literal["closed_loop", "poisson", "gamma", "constant"]
Dist = Literal["fixed", "uniform", "lognormal", "empirical"]
IntArray = npt.NDArray[np.int64]

_ARRIVAL_KEYS: dict[str, tuple[str, ...]] = {
    "closed_loop": ("concurrency", "ramp_up_s"),
    "poisson": ("rate_rps",),
    "gamma": ("rate_rps", "cv"),
    "constant": ("rate_rps",),
}
_LENGTH_KEYS: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "lognormal": ("mean", "sigma", "max"),
    "empirical": ("trace", "field"),
}
_REQUIRED = {
    "concurrency", "rate_rps", "cv", "value", "low", "high", "mean", "sigma", "trace",
    "groups", "tokens", "turns",
}  # fmt: skip


MAX_SIGMA = 10.0
"""Largest lognormal ``sigma`` (e^(10^2/2) already spans more than any token range)."""
MAX_CV = 1000.0
"""Largest (and 1 / smallest) inter-arrival coefficient of variation of a gamma process."""
MAX_PREFIX_GROUPS = 1_000_000


def _int(name: str, value: object, low: int, high: int | None = None, why: str = "") -> None:
    bad = isinstance(value, bool) or not isinstance(value, int) or value < low
    if bad or (high is not None and value > high):  # type: ignore[operator]
        allowed = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high:,}]"
        raise ConfigError(name, value, f"{allowed}{f' ({why})' if why else ''}")


def _num(name: str, value: object, low: float, *, strict: bool, high: float | None = None) -> None:
    ok = finite_number(value) and (value > low if strict else value >= low)  # type: ignore[operator]
    if not ok or (high is not None and not value < high):  # type: ignore[operator]
        allowed = f"a finite number {'>' if strict else '>='} {low}"
        raise ConfigError(name, value, allowed if high is None else f"{allowed} and < {high:g}")


def _keys(name: str, d: object, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise ConfigError(name, d, "a mapping")
    for key in d:
        if key not in allowed:
            raise ConfigError(f"{name}.{key}" if name else str(key), d[key], ", ".join(allowed))
    for key in allowed:
        if key in _REQUIRED and key not in d:
            raise ConfigError(f"{name}.{key}", None, "a value (the field is required)")
    return d


def _kind(name: str, d: object, key: str, choices: tuple[str, ...]) -> str:
    if not isinstance(d, Mapping):
        raise ConfigError(name, d, f"a mapping with {key}: {' | '.join(choices)}")
    value = d.get(key)
    if value not in choices:
        raise ConfigError(f"{name}.{key}", value, " | ".join(choices))
    return str(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalSpec:
    """When requests are sent: an open-loop process or closed-loop clients."""

    process: Process
    rate_rps: float = 1.0
    cv: float = 1.0
    concurrency: int = 1
    ramp_up_s: float = 0.0

    def __post_init__(self) -> None:
        if self.process not in get_args(Process):
            raise ConfigError("process", self.process, " | ".join(get_args(Process)))
        _num("rate_rps", self.rate_rps, 0.0, strict=True)
        if not (finite_number(self.cv) and 1 / MAX_CV <= self.cv <= MAX_CV):
            raise ConfigError("cv", self.cv, f"a number in [{1 / MAX_CV:g}, {MAX_CV:g}]")
        _int("concurrency", self.concurrency, 1, MAX_REQUESTS, MEMORY_WHY)
        if not (finite_number(self.ramp_up_s) and 0 <= self.ramp_up_s < MAX_TIME_S):
            raise ConfigError("ramp_up_s", self.ramp_up_s, TIME_WHY)


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthSpec:
    """A distribution of token counts."""

    dist: Dist
    value: int = 1
    low: int = 1
    high: int = 1
    mean: float = 1.0
    sigma: float = 0.0
    max: int | None = None
    trace: str = ""
    field: Literal["input", "output"] = "input"

    def __post_init__(self) -> None:
        if self.dist not in get_args(Dist):
            raise ConfigError("dist", self.dist, " | ".join(get_args(Dist)))
        _int("value", self.value, 1, MAX_TOKENS)
        _int("low", self.low, 1, MAX_TOKENS)
        _int("high", self.high, self.low if isinstance(self.low, int) else 1, MAX_TOKENS)
        _num("mean", self.mean, 1.0, strict=False, high=MAX_TOKENS + 1)
        if not (finite_number(self.sigma) and 0 <= self.sigma <= MAX_SIGMA):
            raise ConfigError("sigma", self.sigma, f"a number in [0, {MAX_SIGMA:g}]")
        if self.max is not None:
            _int("max", self.max, 1, MAX_TOKENS)
        path_ok = isinstance(self.trace, str) and self.trace and "\x00" not in self.trace
        if self.dist == "empirical" and not path_ok:
            raise ConfigError("trace", self.trace, "a trace file path")
        if self.field not in ("input", "output"):
            raise ConfigError("field", self.field, "input | output")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixSpec:
    """Shared prompt prefixes: ``groups`` groups of ``tokens`` tokens each."""

    groups: int
    tokens: int
    zipf_s: float | None = None

    def __post_init__(self) -> None:
        _int("groups", self.groups, 1, MAX_PREFIX_GROUPS)
        _int("tokens", self.tokens, 1, MAX_TOKENS)
        if self.groups * (self.tokens // HASH_BLOCK_TOKENS) > MAX_BLOCK_IDS:
            raise ConfigError(
                "tokens",
                self.tokens,
                f"at most {MAX_BLOCK_IDS:,} prefix blocks in all "
                f"({self.groups} groups x {self.tokens // HASH_BLOCK_TOKENS} blocks)",
            )
        if self.zipf_s is not None:
            _num("zipf_s", self.zipf_s, 0.0, strict=True, high=1e3)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSpec:
    """Multi-turn sessions of ``turns`` requests with ``think_time_s`` between turns."""

    turns: int
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        _int("turns", self.turns, 1, MAX_REQUESTS, MEMORY_WHY)
        if not (finite_number(self.think_time_s) and 0 <= self.think_time_s < MAX_TIME_S):
            raise ConfigError("think_time_s", self.think_time_s, TIME_WHY)
        if self.think_time_s * (self.turns - 1) >= MAX_TIME_S:
            raise ConfigError(
                "think_time_s",
                self.think_time_s,
                f"at most {MAX_TIME_S:g} s of think time in a session of {self.turns} turns",
            )


def _mean_tokens(spec: LengthSpec) -> float | None:
    """The expected length (None for an empirical trace, known only once it is read)."""
    if spec.dist == "fixed":
        return float(spec.value)
    if spec.dist == "uniform":
        return (spec.low + spec.high) / 2
    if spec.dist == "lognormal":
        return min(spec.mean, float(spec.max or MAX_TOKENS))
    return None


def _expected_blocks(
    spec: WorkloadSpec, n: int, turns: int, mean_in: float, mean_out: float
) -> float:
    """About how many prompt block ids ``generate`` makes (a session's prompts grow)."""
    turns = min(turns, n)
    prefix = spec.prefix.tokens if spec.prefix is not None else 0
    tokens = n * (prefix + mean_in * (turns + 1) / 2 + mean_out * (turns - 1) / 2)
    return tokens / HASH_BLOCK_TOKENS


def _sub(cls: type[Any], name: str, d: Mapping[str, Any], **extra: Any) -> Any:
    """Build a nested spec, prefixing the field name of any error with ``name``."""
    try:
        return cls(**d, **extra)
    except ConfigError as exc:
        raise ConfigError(f"{name}.{exc.field}", exc.value, exc.allowed) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSpec:
    """A synthetic workload; see the module docstring for the meaning of each field."""

    requests: int
    arrival: ArrivalSpec
    input_tokens: LengthSpec
    output_tokens: LengthSpec
    warmup_requests: int = 0
    prefix: PrefixSpec | None = None
    sessions: SessionSpec | None = None
    seed: int = 0
    name: str = "synthetic"

    def __post_init__(self) -> None:
        _int("requests", self.requests, 1, MAX_REQUESTS, MEMORY_WHY)
        _int("warmup_requests", self.warmup_requests, 0, MAX_REQUESTS, MEMORY_WHY)
        _int("seed", self.seed, 0, 2**63 - 1)
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("name", self.name, "a non-empty string")
        n = self.requests + self.warmup_requests
        if n > MAX_REQUESTS:
            raise ConfigError("requests", self.requests, f"with warm-up, {REQUESTS_WHY}")
        turns = self.sessions.turns if self.sessions is not None else 1
        if self.arrival.process != "closed_loop":  # the expected time of the last unit
            span_s = (-(-n // turns) - 1) / self.arrival.rate_rps
            if span_s >= MAX_TIME_S:
                raise ConfigError(
                    "arrival.rate_rps",
                    self.arrival.rate_rps,
                    f"a rate whose {n:,} requests arrive within {MAX_TIME_S:g} s "
                    f"(this one takes about {span_s:.3g} s)",
                )
        mean_in = _mean_tokens(self.input_tokens)
        mean_out = _mean_tokens(self.output_tokens)
        if mean_in is not None and mean_out is not None:
            blocks = _expected_blocks(self, n, turns, mean_in, mean_out)
            if blocks > MAX_BLOCK_IDS:
                raise ConfigError(
                    "requests",
                    self.requests,
                    f"a workload of at most {MAX_BLOCK_IDS:,} prompt blocks in all (this one "
                    f"needs about {blocks:.3g}: fewer requests, turns or tokens)",
                )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], base_dir: str | Path | None = None) -> WorkloadSpec:
        """Build and validate a spec from a YAML-derived mapping.

        Args:
            d: The mapping (see the module docstring).
            base_dir: Folder against which relative empirical trace paths are resolved.

        Returns:
            The validated spec.

        Raises:
            ConfigError: An unknown key, a missing required field or a bad value; the error's
                ``field`` is the dotted path (e.g. ``arrival.rate_rps``).
        """
        if not isinstance(d, Mapping):
            raise ConfigError("workload", d, "a mapping of workload fields")
        _keys("", d, tuple(f.name for f in fields(cls)))
        if "requests" not in d:
            raise ConfigError("requests", None, "a value (the field is required)")
        process = _kind("arrival", d.get("arrival"), "process", tuple(_ARRIVAL_KEYS))
        arrival = _sub(
            ArrivalSpec,
            "arrival",
            _keys("arrival", d["arrival"], ("process", *_ARRIVAL_KEYS[process])),
        )
        lengths = {}
        for name in ("input_tokens", "output_tokens"):
            dist = _kind(name, d.get(name), "dist", tuple(_LENGTH_KEYS))
            spec = dict(_keys(name, d[name], ("dist", *_LENGTH_KEYS[dist])))
            if dist == "empirical":
                trace = spec["trace"]
                if isinstance(trace, str | Path) and base_dir is not None:
                    spec["trace"] = str((Path(base_dir) / trace).resolve())
                spec.setdefault("field", name.removesuffix("_tokens"))
            lengths[name] = _sub(LengthSpec, name, spec)
        prefix = d.get("prefix")
        if prefix is not None:
            prefix = _sub(
                PrefixSpec, "prefix", _keys("prefix", prefix, ("groups", "tokens", "zipf_s"))
            )
        sessions = d.get("sessions")
        if sessions is not None:
            sessions = _sub(
                SessionSpec, "sessions", _keys("sessions", sessions, ("turns", "think_time_s"))
            )
        plain = {k: d[k] for k in ("requests", "warmup_requests", "seed", "name") if k in d}
        return cls(arrival=arrival, prefix=prefix, sessions=sessions, **lengths, **plain)


def _lengths(
    spec: LengthSpec,
    n: int,
    rng: np.random.Generator,
    base_dir: Path | None,
    traces: dict[Path, list[Request]],
) -> IntArray:
    if spec.dist == "fixed":
        return np.full(n, spec.value, dtype=np.int64)
    if spec.dist == "uniform":
        return rng.integers(spec.low, spec.high + 1, size=n, dtype=np.int64)
    if spec.dist == "lognormal":
        mu = math.log(spec.mean) - spec.sigma**2 / 2  # so that E[X] = mean
        values = np.rint(rng.lognormal(mu, spec.sigma, size=n))
        high = min(spec.max, MAX_TOKENS) if spec.max is not None else MAX_TOKENS
        return np.clip(values, 1, high).astype(np.int64)
    path = Path(spec.trace)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if path not in traces:
        traces[path] = load_trace(path)
    trace = traces[path]
    pool = np.fromiter(
        (r.input_tokens if spec.field == "input" else r.output_tokens for r in trace),
        dtype=np.int64,
        count=len(trace),
    )
    return rng.choice(pool, size=n)


def _arrivals(spec: ArrivalSpec, n: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """Arrival times of ``n`` open-loop units, the first at 0 s."""
    if spec.process == "constant":
        return np.arange(n, dtype=np.float64) / spec.rate_rps
    if spec.process == "poisson":
        gaps = rng.exponential(1.0 / spec.rate_rps, size=n - 1)
    else:  # gamma: shape 1/cv^2, mean 1/rate
        shape = 1.0 / spec.cv**2
        gaps = rng.gamma(shape, 1.0 / (spec.rate_rps * shape), size=n - 1)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def generate(
    spec: WorkloadSpec,
    rng: np.random.Generator | None = None,
    base_dir: str | Path | None = None,
) -> list[Request]:
    """Generate the requests a spec describes.

    Args:
        spec: The workload spec.
        rng: Source of randomness; ``np.random.default_rng(spec.seed)`` when None. Independent
            child streams drive arrivals, input lengths, output lengths and prefix groups.
        base_dir: Folder against which relative empirical trace paths are resolved.

    Returns:
        ``spec.warmup_requests + spec.requests`` requests, ids 0..n-1, ``after_id < id``.
    """
    rng = np.random.default_rng(spec.seed) if rng is None else rng
    arrival_rng, input_rng, output_rng, prefix_rng = rng.spawn(4)
    folder = Path(base_dir) if base_dir is not None else None
    n = spec.warmup_requests + spec.requests
    turns = spec.sessions.turns if spec.sessions is not None else 1
    think_s = spec.sessions.think_time_s if spec.sessions is not None else 0.0
    units = -(-n // turns)
    traces: dict[Path, list[Request]] = {}  # an empirical trace read once per call
    new_in = _lengths(spec.input_tokens, n, input_rng, folder, traces)
    out = _lengths(spec.output_tokens, n, output_rng, folder, traces).tolist()
    closed = spec.arrival.process == "closed_loop"
    clients = spec.arrival.concurrency
    if closed:
        starts = (spec.arrival.ramp_up_s * np.arange(min(units, clients)) / clients).tolist()
    else:
        starts = _arrivals(spec.arrival, units, arrival_rng).tolist()

    group_ids: list[tuple[int, ...]] = [()]
    prefix_tokens = 0
    group_of = [0] * units
    if spec.prefix is not None:
        prefix_tokens = spec.prefix.tokens
        per_group = prefix_tokens // HASH_BLOCK_TOKENS
        groups = spec.prefix.groups
        group_ids = [tuple(range(g * per_group, (g + 1) * per_group)) for g in range(groups)]
        weights = None
        if spec.prefix.zipf_s is not None:
            ranks = np.arange(1, groups + 1, dtype=np.float64)
            weights = ranks**-spec.prefix.zipf_s / np.sum(ranks**-spec.prefix.zipf_s)
        group_of = prefix_rng.choice(groups, size=units, p=weights).tolist()
    next_hash = len(group_ids) * len(group_ids[0])
    if not closed and starts and not starts[-1] < MAX_TIME_S:
        raise ConfigError(
            "arrival.rate_rps",
            spec.arrival.rate_rps,
            f"a rate whose requests arrive within {MAX_TIME_S:g} s (the last arrives at "
            f"{starts[-1]:.3g} s)",
        )
    blocks = 0  # block ids held by the requests made so far, against MAX_BLOCK_IDS

    new_list = new_in.tolist()
    requests: list[Request] = []
    for unit in range(units):
        first = unit * turns
        after: int | None = None
        arrival = 0.0
        if unit < len(starts):
            arrival = starts[unit]
        else:  # closed loop: follow the last request of this client's previous unit
            after = first - (clients - 1) * turns - 1
        shared = group_ids[group_of[unit]]
        prompt = prefix_tokens + new_list[first]
        for i in range(first, min(first + turns, n)):
            if i > first:
                previous = requests[-1]
                prompt = previous.input_tokens + previous.output_tokens + new_list[i]
                shared = previous.block_hashes[: previous.input_tokens // HASH_BLOCK_TOKENS]
                after = i - 1
            fresh = -(-prompt // HASH_BLOCK_TOKENS) - len(shared)
            blocks += fresh + len(shared)
            if blocks > MAX_BLOCK_IDS or prompt > MAX_TOKENS:
                raise ConfigError(
                    "requests",
                    spec.requests,
                    f"a workload of at most {MAX_BLOCK_IDS:,} prompt blocks in all and "
                    f"{MAX_TOKENS:,} tokens a prompt (request {i} needs {prompt:,} tokens, "
                    f"{blocks:,} blocks so far: fewer requests, turns or tokens)",
                )
            requests.append(
                Request(
                    id=i,
                    arrival_s=arrival,
                    input_tokens=prompt,
                    output_tokens=out[i],
                    block_hashes=shared + tuple(range(next_hash, next_hash + fresh)),
                    session_id=unit if spec.sessions is not None else None,
                    after_id=after,
                    delay_s=think_s if i > first else 0.0,
                )
            )
            next_hash += fresh
    return requests


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
            _keys("", data, ("client", "name"))
            return ClientWorkload(
                client=BenchmarkClient.from_dict(data["client"]),
                name=str(data["name"]) if named else path.stem,
            )
        if isinstance(data, Mapping) and "trace" in data:
            keys = ("trace", "speedup", "max_requests", "warmup_requests", "name")
            _keys("", data, keys)
            _int("warmup_requests", data.get("warmup_requests", 0), 0, MAX_REQUESTS, MEMORY_WHY)
            if data.get("max_requests") is not None:
                _int("max_requests", data["max_requests"], 1, MAX_REQUESTS, MEMORY_WHY)
            _num("speedup", data.get("speedup", 1.0), 0.0, strict=True)
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
