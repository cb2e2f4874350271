"""Cancellable timers on a simpy environment.

A timer is an entry of simpy's queue carrying a version number (or an id its callback needs:
a request, a starting worker); a versioned callback compares that number with the owner's
current one and ignores a superseded timer. Rescheduling is therefore "bump the version,
schedule a new timer", with no search in simpy's queue.

Every entry is ``(time, priority, event id, callback, argument)``, pushed by :func:`at` (no
event object: ~50-90k per Mooncake run), and :func:`run` calls ``callback(argument)``. The
``(time, priority, event id)`` key is simpy's own, so entries of one instant run in priority
order, then in the order they were made.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import StopSimulation
from simpy.events import EventPriority

from dynosim.workload.columns import gc_paused


def at(
    env: simpy.Environment, at_us: int, priority: EventPriority, callback: Callable[[int], None],
    arg: int,
) -> None:  # fmt: skip
    """Call ``callback(arg)`` at time ``at_us`` (an entry only: no object to build or free)."""
    heappush(env._queue, (at_us, priority, next(env._eid), callback, arg))  # type: ignore[misc]


def run(env: simpy.Environment) -> None:
    """``env.run()`` for an environment whose events are all timers (:func:`at`).

    Pops the next entry and calls its callback until none is left or a callback raises
    ``StopSimulation`` (a timer never fails, so simpy's check for an undefused failure is moot).

    The cyclic collector is off meanwhile (:func:`~dynosim.workload.columns.gc_paused`): the
    events make no reference cycles (the run's garbage is freed by reference counting: a
    collection right after a run finds nothing), so the collections the run's allocations would
    trigger only walk the simulation's live objects. On 512 workers those walks were a fifth of
    the run's last-level cache misses (about 110 a request, under cachegrind with a 1 MiB cache).
    """
    queue: list[Any] = env._queue  # 5-tuples, not simpy's 4
    with gc_paused():
        try:
            while queue:
                env._now, _, _, callback, arg = heappop(queue)
                callback(arg)
        except StopSimulation:
            pass
