"""Synthetic workload specs: the validated spec (from a YAML-derived dict) and its parts.

The generator that turns a spec into requests is :mod:`dynosim.workload.generate`; a workload
file is read by :mod:`dynosim.workload.files`.

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

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args

from dynosim.checks import choice, integer, known_keys, text
from dynosim.errors import ConfigError
from dynosim.types import HASH_BLOCK_TOKENS
from dynosim.workload.limits import (
    MAX_BLOCK_IDS,
    MAX_REQUESTS,
    MAX_TIME_S,
    MAX_TOKENS,
    MEMORY_WHY,
    REQUESTS_WHY,
    TIME_WHY,
    finite_in,
    finite_number,
)

__all__ = [
    "ArrivalSpec",
    "LengthSpec",
    "PrefixSpec",
    "SessionSpec",
    "WorkloadSpec",
]

Process = Literal["closed_loop", "poisson", "gamma", "constant"]
Dist = Literal["fixed", "uniform", "lognormal", "empirical"]

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


def _fields(name: str, d: object, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    """``d`` if its keys are among ``allowed`` and it has those of them that are required."""
    data = known_keys(name, d, allowed)
    for key in allowed:
        if key in _REQUIRED and key not in data:
            raise ConfigError(f"{name}.{key}", None, "a value (the field is required)")
    return data


def _kind(name: str, d: object, key: str, choices: tuple[str, ...]) -> str:
    """The ``key`` of mapping ``d`` (which kind of process or distribution), one of ``choices``."""
    if not isinstance(d, Mapping):
        raise ConfigError(name, d, f"a mapping with {key}: {' | '.join(choices)}")
    return str(choice(f"{name}.{key}", d.get(key), choices))


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrivalSpec:
    """When requests are sent: an open-loop process or closed-loop clients."""

    process: Process
    rate_rps: float = 1.0
    cv: float = 1.0
    concurrency: int = 1
    ramp_up_s: float = 0.0

    def __post_init__(self) -> None:
        choice("process", self.process, get_args(Process))
        finite_in("rate_rps", self.rate_rps, 0.0, open_low=True)
        if not (finite_number(self.cv) and 1 / MAX_CV <= self.cv <= MAX_CV):
            raise ConfigError("cv", self.cv, f"a number in [{1 / MAX_CV:g}, {MAX_CV:g}]")
        integer("concurrency", self.concurrency, 1, MAX_REQUESTS, why=MEMORY_WHY)
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
        choice("dist", self.dist, get_args(Dist))
        integer("value", self.value, 1, MAX_TOKENS)
        integer("low", self.low, 1, MAX_TOKENS)
        integer("high", self.high, self.low if isinstance(self.low, int) else 1, MAX_TOKENS)
        finite_in("mean", self.mean, 1.0, MAX_TOKENS + 1, open_high=True)
        if not (finite_number(self.sigma) and 0 <= self.sigma <= MAX_SIGMA):
            raise ConfigError("sigma", self.sigma, f"a number in [0, {MAX_SIGMA:g}]")
        if self.max is not None:
            integer("max", self.max, 1, MAX_TOKENS)
        path_ok = isinstance(self.trace, str) and self.trace and "\x00" not in self.trace
        if self.dist == "empirical" and not path_ok:
            raise ConfigError("trace", self.trace, "a trace file path")
        choice("field", self.field, ("input", "output"))


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixSpec:
    """Shared prompt prefixes: ``groups`` groups of ``tokens`` tokens each."""

    groups: int
    tokens: int
    zipf_s: float | None = None

    def __post_init__(self) -> None:
        integer("groups", self.groups, 1, MAX_PREFIX_GROUPS)
        integer("tokens", self.tokens, 1, MAX_TOKENS)
        if self.groups * (self.tokens // HASH_BLOCK_TOKENS) > MAX_BLOCK_IDS:
            raise ConfigError(
                "tokens",
                self.tokens,
                f"at most {MAX_BLOCK_IDS:,} prefix blocks in all "
                f"({self.groups} groups x {self.tokens // HASH_BLOCK_TOKENS} blocks)",
            )
        if self.zipf_s is not None:
            finite_in("zipf_s", self.zipf_s, 0.0, 1e3, open_low=True, open_high=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSpec:
    """Multi-turn sessions of ``turns`` requests with ``think_time_s`` between turns."""

    turns: int
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        integer("turns", self.turns, 1, MAX_REQUESTS, why=MEMORY_WHY)
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
        integer("requests", self.requests, 1, MAX_REQUESTS, why=MEMORY_WHY)
        integer("warmup_requests", self.warmup_requests, 0, MAX_REQUESTS, why=MEMORY_WHY)
        integer("seed", self.seed, 0, 2**63 - 1)
        text("name", self.name)
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
        _fields("", d, tuple(f.name for f in fields(cls)))
        if "requests" not in d:
            raise ConfigError("requests", None, "a value (the field is required)")
        process = _kind("arrival", d.get("arrival"), "process", tuple(_ARRIVAL_KEYS))
        arrival = _sub(
            ArrivalSpec,
            "arrival",
            _fields("arrival", d["arrival"], ("process", *_ARRIVAL_KEYS[process])),
        )
        lengths = {}
        for name in ("input_tokens", "output_tokens"):
            dist = _kind(name, d.get(name), "dist", tuple(_LENGTH_KEYS))
            spec = dict(_fields(name, d[name], ("dist", *_LENGTH_KEYS[dist])))
            if dist == "empirical":
                trace = spec["trace"]
                if isinstance(trace, str | Path) and base_dir is not None:
                    spec["trace"] = str((Path(base_dir) / trace).resolve())
                spec.setdefault("field", name.removesuffix("_tokens"))
            lengths[name] = _sub(LengthSpec, name, spec)
        prefix = d.get("prefix")
        if prefix is not None:
            prefix = _sub(
                PrefixSpec, "prefix", _fields("prefix", prefix, ("groups", "tokens", "zipf_s"))
            )
        sessions = d.get("sessions")
        if sessions is not None:
            sessions = _sub(
                SessionSpec, "sessions", _fields("sessions", sessions, ("turns", "think_time_s"))
            )
        plain = {k: d[k] for k in ("requests", "warmup_requests", "seed", "name") if k in d}
        return cls(arrival=arrival, prefix=prefix, sessions=sessions, **lengths, **plain)
