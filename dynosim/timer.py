"""Cancellable timers on a simpy environment.

A timer is an already-triggered event carrying a version number; its callback compares that
number with the owner's current one and ignores a superseded timer. Rescheduling is therefore
"bump the version, schedule a new timer", with no search in simpy's queue.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy
from simpy.events import EventPriority


def schedule_timer(
    env: simpy.Environment,
    at_us: int,
    version: int,
    callback: Callable[[simpy.Event], None],
    priority: EventPriority,
) -> None:
    """Call ``callback(event)`` at time ``at_us``; ``event.value`` is ``version``."""
    ev = simpy.Event(env)
    ev._ok = True
    ev._value = version
    ev.callbacks.append(callback)
    env.schedule(ev, priority, at_us - env.now)
