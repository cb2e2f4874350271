"""Transforms of request lists: speed-up, head, random sample and time slice.

Every transform returns new requests with ids renumbered 0..n-1 in order of position. A kept
request whose ``after_id`` was dropped now follows its nearest kept ancestor on the ``after_id``
chain (the earlier turn of its session, or the earlier request of its closed-loop client), or
nothing if no ancestor is kept; so ``after_id < id`` always holds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from dynosim.errors import ConfigError
from dynosim.types import Request
from dynosim.workload.limits import MAX_TIME_S

__all__ = ["head", "sample", "select", "speedup", "time_slice"]


def select(requests: Sequence[Request], keep: Sequence[int]) -> list[Request]:
    """Keep the requests at the given positions, renumbering ids and remapping ``after_id``.

    Args:
        requests: Requests with ids equal to their positions and ``after_id < id``.
        keep: Positions to keep, strictly increasing.

    Returns:
        The kept requests with ids 0..len(keep)-1.
    """
    new_id: dict[int, int] = {}
    out: list[Request] = []
    by_id = {r.id: r for r in requests} if any(r.id != i for i, r in enumerate(requests)) else None
    for position in keep:
        request = requests[position]
        ancestor = request.after_id
        while ancestor is not None and ancestor not in new_id:
            parent = requests[ancestor] if by_id is None else by_id[ancestor]
            ancestor = parent.after_id
        after = new_id[ancestor] if ancestor is not None else None
        new_id[request.id] = len(out)
        out.append(
            replace(
                request,
                id=len(out),
                after_id=after,
                delay_s=request.delay_s if after is not None else 0.0,
            )
        )
    return out


def speedup(requests: Sequence[Request], factor: float) -> list[Request]:
    """Compress time: arrival times and think-time delays are divided by ``factor``.

    Args:
        requests: The requests.
        factor: Speed-up, finite and > 0 (2 = twice the request rate).

    Returns:
        New requests with the same ids.

    Raises:
        ConfigError: ``factor`` is not a finite number > 0, or it would push a time past
            ``MAX_TIME_S``.
    """
    if isinstance(factor, bool) or not isinstance(factor, int | float):
        raise ConfigError("speedup", factor, "a finite number > 0")
    if not math.isfinite(factor) or factor <= 0:
        raise ConfigError("speedup", factor, "a finite number > 0")
    latest = max((max(r.arrival_s, r.delay_s) for r in requests), default=0.0) / factor
    if not latest < MAX_TIME_S:
        raise ConfigError(
            "speedup",
            factor,
            f"a factor that keeps every time below {MAX_TIME_S:g} s (the latest would be "
            f"{latest:.3g} s)",
        )
    return [
        replace(r, arrival_s=r.arrival_s / factor, delay_s=r.delay_s / factor) for r in requests
    ]


def head(requests: Sequence[Request], n: int) -> list[Request]:
    """Keep the first ``n`` requests (all of them if there are fewer).

    Args:
        requests: The requests.
        n: How many to keep, >= 0.

    Returns:
        The first ``n`` requests, renumbered.

    Raises:
        ConfigError: ``n`` is not an integer >= 0.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError("max_requests", n, "an integer >= 0")
    return select(requests, range(min(n, len(requests))))


def sample(requests: Sequence[Request], fraction: float, rng: np.random.Generator) -> list[Request]:
    """Keep a random ``round(fraction * n)`` of the requests, in their original order.

    Args:
        requests: The requests.
        fraction: Share to keep, in (0, 1].
        rng: Source of randomness.

    Returns:
        The sampled requests, renumbered.

    Raises:
        ConfigError: ``fraction`` is not in (0, 1].
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        raise ConfigError("sample", fraction, "a number in (0, 1]")
    count = round(fraction * len(requests))
    keep = np.sort(rng.choice(len(requests), size=count, replace=False))
    return select(requests, keep.tolist())


def time_slice(requests: Sequence[Request], start_s: float, end_s: float) -> list[Request]:
    """Keep the requests with ``start_s <= arrival_s < end_s`` and shift time to ``start_s``.

    Meant for open-loop traces: a dependent request is selected by its ``arrival_s`` (the
    earliest time it may be sent), and its new ``arrival_s`` is ``max(0, arrival_s - start_s)``.

    Args:
        requests: The requests.
        start_s: Start of the window, seconds, >= 0.
        end_s: End of the window (exclusive), > ``start_s``.

    Returns:
        The requests in the window, renumbered, with arrivals relative to ``start_s``.

    Raises:
        ConfigError: The window is empty or negative.
    """
    if not (math.isfinite(start_s) and start_s >= 0):
        raise ConfigError("time_slice.start_s", start_s, "a finite number >= 0")
    if not end_s > start_s:
        raise ConfigError("time_slice.end_s", end_s, f"a number > start_s ({start_s})")
    keep = [i for i, r in enumerate(requests) if start_s <= r.arrival_s < end_s]
    return [replace(r, arrival_s=max(0.0, r.arrival_s - start_s)) for r in select(requests, keep)]
