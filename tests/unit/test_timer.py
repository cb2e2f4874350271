"""The timer loop (dynosim.timer): entries run in key order, the collector is restored."""

from __future__ import annotations

import gc

import pytest
import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL, URGENT

from dynosim.timer import at, run


@pytest.mark.parametrize("collecting", [True, False])
def test_run_order_and_collector(collecting: bool) -> None:
    """Entries run by (time, priority, creation); the collector is off during the run and as
    it was after it, also when a callback stops the run."""
    env = simpy.Environment()
    seen: list[tuple[int, int, bool]] = []

    def note(arg: int) -> None:
        seen.append((int(env.now), arg, gc.isenabled()))
        if arg == 9:
            raise StopSimulation

    at(env, 5, NORMAL, note, 1)
    at(env, 5, URGENT, note, 2)
    at(env, 3, NORMAL, note, 3)
    at(env, 5, NORMAL, note, 4)
    at(env, 7, NORMAL, note, 9)
    at(env, 8, NORMAL, note, 5)
    was = gc.isenabled()
    try:
        if not collecting:
            gc.disable()
        run(env)
        assert gc.isenabled() is collecting
    finally:
        if was:
            gc.enable()
    assert seen == [(3, 3, False), (5, 2, False), (5, 1, False), (5, 4, False), (7, 9, False)]
