"""Cancellable timers on a simpy environment.

A timer is an already-triggered event carrying a version number; its callback compares that
number with the owner's current one and ignores a superseded timer. Rescheduling is therefore
"bump the version, schedule a new timer", with no search in simpy's queue.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush

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
        heappush(env._queue, (at_us, priority, next(env._eid), self))


def run(env: simpy.Environment) -> None:
    """``env.run()`` for an environment whose events are all timers, one call less per event.

    Pops the next event and calls its callbacks until none is left or a callback raises
    ``StopSimulation`` (a timer never fails, so simpy's check for an undefused failure is moot).
    """
    queue = env._queue
    try:
        while queue:
            env._now, _, _, event = heappop(queue)
            for callback in event.callbacks:
                callback(event)
    except StopSimulation:
        pass
