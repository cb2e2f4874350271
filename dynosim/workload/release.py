"""When each request of a workload may be sent, in integer microseconds.

A request that follows none is sent at its ``arrival_s``; one that follows another
(``after_id``: a session's next turn, a closed-loop client's next request) ``delay_s`` after
that one completes (or is rejected) and not before its ``arrival_s``. A request sent
``after_warmup`` (a benchmark tool's measured phase) follows the warm-up phase the same way:
the simulation releases the followers of :data:`WARMUP_PHASE` when the run's
``warmup_requests``-th request completes or is rejected.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from dynosim.errors import ConfigError
from dynosim.types import Request
from dynosim.workload.limits import MAX_TIME_S

__all__ = ["WARMUP_PHASE", "arrival_heap", "check_requests", "to_us"]

WARMUP_PHASE = -1
"""The key of the requests sent ``after_warmup`` among the followers (no request's id)."""


def check_requests(
    requests: Sequence[Request], speedup: float, sample_interval_s: float | None
) -> None:
    """Refuse request ids out of order, a follower of a later request and bad rates."""
    for i, r in enumerate(requests):
        if r.id != i:
            raise ConfigError("requests", f"request at position {i} has id {r.id}", "ids 0..n-1")
        if r.after_id is not None and not 0 <= r.after_id < i:
            raise ConfigError(f"requests[{i}].after_id", r.after_id, f"an id in [0, {i})")
        if r.after_warmup and r.after_id is not None:
            raise ConfigError(
                f"requests[{i}].after_warmup", True, f"false for a request that follows another"
                f" (after_id {r.after_id})"
            )  # fmt: skip
    if not (isinstance(speedup, int | float) and 0 < speedup < math.inf):
        raise ConfigError("speedup", speedup, "a finite number > 0")
    if sample_interval_s is not None and not (
        isinstance(sample_interval_s, int | float) and 0 < sample_interval_s < math.inf
    ):
        raise ConfigError("sample_interval_s", sample_interval_s, "a finite number > 0")


def to_us(seconds: float) -> int:
    """``seconds`` in integer microseconds (a time beyond the simulator's range is refused)."""
    if not -MAX_TIME_S < seconds < MAX_TIME_S:  # NaN fails too
        raise ConfigError(
            "request time", seconds, f"a finite number of seconds below {MAX_TIME_S:g} (check"
            " the workload's times and speed-up)"
        )  # fmt: skip
    return round(seconds * 1e6)


def arrival_heap(
    requests: Sequence[Request], speedup: float
) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """The ``(arrival, id)`` heap of the requests that follow none, and each one's followers.

    The requests sent ``after_warmup`` follow :data:`WARMUP_PHASE`.
    """
    followers: dict[int, list[int]] = {}
    heap: list[tuple[int, int]] = []
    for r in requests:
        if r.after_warmup:
            followers.setdefault(WARMUP_PHASE, []).append(r.id)
        elif r.after_id is None:
            heap.append((to_us(r.arrival_s / speedup), r.id))
        else:
            followers.setdefault(r.after_id, []).append(r.id)
    heapq.heapify(heap)
    return heap, followers
