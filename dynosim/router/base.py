"""What every router is, the stateless routers, and the KV-aware cost they all compute alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker


class Router(Protocol):
    """Picks a worker index for a request arriving at ``now_us``.

    Called once per request, in arrival order; may read (never change) worker state except
    to bring a fast-forwarded worker's KV up to ``now_us`` (:meth:`EngineWorker.sync`).
    """

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Index into ``workers`` of the worker that serves ``rr``."""
        ...

    def workers_changed(self) -> None:
        """The list of routable workers changed in place (a pool added or drained one)."""
        ...


class Stateless:
    """A router that keeps nothing about the workers (so list changes need no work)."""

    def workers_changed(self) -> None:
        """Nothing to do."""


class RoundRobin(Stateless):
    """Workers in turn, ignoring their state."""

    def __init__(self) -> None:
        self._next = 0

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Next worker in turn."""
        i = self._next % len(workers)
        self._next = i + 1
        return i


class RandomRouter(Stateless):
    """A uniformly random worker."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """A random worker."""
        return int(self._rng.integers(len(workers)))


def kv_cost(
    weight: float, target: int, bs: int, hit: int, unit: int, used: int, pending: int
) -> float:
    """Dynamo's KV-aware cost of a worker: ``weight * prefill blocks + active blocks``.

    ``hit`` cached leading units of ``unit`` blocks each, ``used`` blocks held, ``pending``
    prompt tokens queued (counted as prefill and as active: Dynamo counts a request's blocks
    as active from the moment it routes it, docs.nvidia.com/dynamo "Router Design", block
    tracking). The one float expression both the scan and the indexed router evaluate, so that
    their costs are the same to the last bit.
    """
    queued = pending / bs
    prefill = -(-target // bs) - hit * unit + queued
    return weight * prefill + used + queued
