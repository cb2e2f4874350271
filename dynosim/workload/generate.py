"""Generate the requests a synthetic :class:`~dynosim.workload.spec.WorkloadSpec` describes.

What the spec's fields mean for the requests (arrivals, sessions, prefix groups, hash ids) is
in :mod:`dynosim.workload.spec`'s docstring.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dynosim.errors import ConfigError
from dynosim.types import HASH_BLOCK_TOKENS, Request
from dynosim.workload.columns import gc_paused
from dynosim.workload.limits import MAX_BLOCK_IDS, MAX_TIME_S, MAX_TOKENS
from dynosim.workload.traces import load_trace

if TYPE_CHECKING:  # annotations only: replaying a trace does not build the spec's dataclasses
    from dynosim.workload.spec import ArrivalSpec, LengthSpec, WorkloadSpec

__all__ = ["generate"]

IntArray = npt.NDArray[np.int64]


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
    with gc_paused():
        return _generate(spec, rng, base_dir)


def _generate(
    spec: WorkloadSpec, rng: np.random.Generator | None, base_dir: str | Path | None
) -> list[Request]:
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
