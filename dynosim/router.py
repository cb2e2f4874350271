"""Routers: which worker gets an arriving request. Routing is a synchronous call at arrival."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dynosim.config import DeploymentConfig, RouterName
from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.types import HASH_BLOCK_TOKENS


class Router(Protocol):
    """Picks a worker index for a request arriving at ``now_us``.

    Called once per request, in arrival order; may read (never change) worker state.
    """

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Index into ``workers`` of the worker that serves ``rr``."""
        ...


class RoundRobin:
    """Workers in turn, ignoring their state."""

    def __init__(self) -> None:
        self._next = 0

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Next worker in turn."""
        i = self._next % len(workers)
        self._next = i + 1
        return i


class RandomRouter:
    """A uniformly random worker."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """A random worker."""
        return int(self._rng.integers(len(workers)))


class LeastLoaded:
    """The worker with the fewest outstanding requests (ties: fewer KV blocks, then index)."""

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Least-loaded worker.

        Only the workers tied on the fewest outstanding requests are brought up to date for the
        KV tie-break (a fast-forwarded worker's KV catches up whenever it is next read, so
        leaving the others as they are changes nothing).
        """
        counts = [w.outstanding for w in workers]
        low = min(counts)
        tied = [i for i, c in enumerate(counts) if c == low]
        if len(tied) == 1:
            return tied[0]
        best, best_kv = tied[0], float("inf")
        for i in tied:
            w = workers[i]
            w.sync(now_us)
            kv = w.kv_load_blocks
            if kv < best_kv:
                best, best_kv = i, kv
        return best


class KvAware:
    """Dynamo's KV-aware cost: ``overlap_weight * prefill blocks + active blocks``.

    Prefill blocks are the prompt's blocks not already cached on the worker plus the prompt
    blocks already routed there and not yet prefilled; active blocks are the KV blocks its
    running requests hold plus those queued prompt blocks (Dynamo counts a request's blocks as
    active from the moment it routes it: docs.nvidia.com/dynamo, "Router Design", block
    tracking). The lowest cost wins
    (ties broken at random); with ``temperature > 0`` a worker is sampled with probability
    proportional to ``exp(-normalised cost / temperature)``.
    """

    def __init__(self, overlap_weight: float, temperature: float, rng: np.random.Generator) -> None:
        self.overlap_weight = overlap_weight
        self.temperature = temperature
        self._rng = rng

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Lowest-cost worker, or a softmax sample."""
        hashes, target, weight = rr.hashes, rr.target, self.overlap_weight
        limit = min(len(hashes), (target - 1) // HASH_BLOCK_TOKENS)
        costs: list[float] = []
        for w in workers:
            w.sync(now_us)
            kv, bs = w.kv, w.block_size
            hit = kv.match(hashes, limit) if limit > 0 else 0
            queued = w.pending_prefill / bs
            prefill = -(-target // bs) - hit * kv.unit_blocks + queued
            # Active blocks count a request from the moment it is routed (Dynamo's router
            # design doc: incremented when a request is added), so queued prompts count too.
            costs.append(weight * prefill + kv.used + queued)
        if self.temperature > 0:
            return self._sample(np.array(costs))
        low = min(costs)
        best = [i for i, c in enumerate(costs) if c == low]
        return best[0] if len(best) == 1 else best[int(self._rng.integers(len(best)))]

    def _sample(self, costs: npt.NDArray[np.float64]) -> int:
        """A worker drawn with probability ``exp(-normalised cost / temperature)``."""
        span = costs.max() - costs.min()
        z = (costs - costs.min()) / span if span > 0 else np.zeros_like(costs)
        p = np.exp(-z / self.temperature)
        return int(self._rng.choice(len(costs), p=p / p.sum()))


class KvLoad:
    """The worker with the fewest active KV blocks: held, queued and arriving by transfer.

    Dynamo's KV router with the prefix-overlap term off, as it routes to decode workers
    (their caches hold no prompt to reuse); ties go to the lowest index.
    """

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Least KV-loaded worker."""
        best, best_cost = 0, float("inf")
        for i, w in enumerate(workers):
            w.sync(now_us)
            cost = w.kv_load_blocks
            if cost < best_cost:
                best, best_cost = i, cost
        return best


ROUTERS: dict[RouterName, Callable[[DeploymentConfig, np.random.Generator], Router]] = {
    "round_robin": lambda config, rng: RoundRobin(),
    "random": lambda config, rng: RandomRouter(rng),
    "least_loaded": lambda config, rng: LeastLoaded(),
    "kv_load": lambda config, rng: KvLoad(),
    "kv_aware": lambda config, rng: KvAware(
        config.kv_router.overlap_weight, config.kv_router.temperature, rng
    ),
}
"""Each router by name, built from the deployment (its KV router settings) and the run's RNG."""


def make_router(
    config: DeploymentConfig, rng: np.random.Generator, name: RouterName | None = None
) -> Router:
    """The router ``name`` (default: the deployment's ``router``)."""
    return ROUTERS[config.router if name is None else name](config, rng)
