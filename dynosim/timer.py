"""Cancellable timers on a simpy environment.

A timer is an entry of simpy's queue carrying a version number; its callback compares that
number with the owner's current one and ignores a superseded timer. Rescheduling is therefore
"bump the version, schedule a new timer", with no search in simpy's queue.

Every entry is ``(time, priority, event id, callback, argument)`` and :func:`run` calls
``callback(argument)``: the hot paths (a worker's step boundaries, arrivals, KV handovers and
transfers, ~50-90k per Mooncake run) push a bare entry with :func:`at`, no event object; a
:class:`Timer` is one whose argument is the timer itself.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

import simpy
from simpy.core import StopSimulation
from simpy.events import EventPriority


class Timer(simpy.Event):
    """An event that calls ``callback(timer)`` at time ``at_us``, with a priority.

    Triggered when created, as :class:`simpy.Timeout` is (its ``__init__`` likewise sets the
    event's state itself rather than calling ``Event.__init__``), but at an absolute time and
    with a simpy priority, so that events of one instant run in a chosen order.

    Attributes:
        version: The number the timer was set with (also its ``value``): the owner's version
            number then, or an id the callback needs (a request, a starting worker).
    """

    __slots__ = ("version",)

    def __init__(
        self,
        env: simpy.Environment,
        at_us: int,
        version: int,
        callback: Callable[[Timer], None],
        priority: EventPriority,
    ) -> None:
        self.env = env
        self.callbacks = [callback]
        self._value = version
        self._ok = True
        self.version = version
        # env.schedule(self, priority, at_us - env.now) inlined: the same (time, priority,
        # event id) key in simpy's queue, one call less per event (times are integers).
        heappush(env._queue, (at_us, priority, next(env._eid), callback, self))  # type: ignore[misc]


def at(
    env: simpy.Environment, at_us: int, priority: EventPriority, callback: Callable[[int], None],
    arg: int,
) -> None:  # fmt: skip
    """Call ``callback(arg)`` at time ``at_us`` (an entry only: no object to build or free)."""
    heappush(env._queue, (at_us, priority, next(env._eid), callback, arg))  # type: ignore[misc]


def run(env: simpy.Environment) -> None:
    """``env.run()`` for an environment whose events are all timers (:func:`at`, :class:`Timer`).

    Pops the next entry and calls its callback until none is left or a callback raises
    ``StopSimulation`` (a timer never fails, so simpy's check for an undefused failure is moot).
    """
    queue: list[Any] = env._queue  # 5-tuples, not simpy's 4
    try:
        while queue:
            env._now, _, _, callback, arg = heappop(queue)
            callback(arg)
    except StopSimulation:
        pass
