"""The scanning routers: every worker read at every decision, O(workers x prompt blocks).

These are the routers as they were before the indexes (:mod:`dynosim.router.indexed`): the
reference the indexed routers must match decision for decision
(``tests/unit/test_router_index.py``), and the path KV-aware routing with ``temperature > 0``
keeps (sampling over every worker's cost needs every cost).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.router.base import Stateless, kv_cost
from dynosim.types import HASH_BLOCK_TOKENS


class LeastLoadedScan(Stateless):
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


class KvAwareScan(Stateless):
    """Dynamo's KV-aware cost: ``overlap_weight * prefill blocks + active blocks``.

    Prefill blocks are the prompt's blocks not already cached on the worker plus the prompt
    blocks already routed there and not yet prefilled; active blocks are the KV blocks its
    running requests hold plus those queued prompt blocks (:func:`kv_cost`). The lowest cost
    wins (ties broken at random); with ``temperature > 0`` a worker is sampled with probability
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
            kv = w.kv
            hit = kv.match(hashes, limit) if limit > 0 else 0
            used = kv.total_blocks - kv.free - kv.evictable_blocks  # kv.used, inline
            costs.append(
                kv_cost(weight, target, w.block_size, hit, kv.unit_blocks, used, w.pending_prefill)
            )
        if self.temperature > 0:
            return self._sample(np.array(costs))
        low = min(costs)
        if costs.count(low) == 1:  # no tie (the usual case): no list of the tied
            return costs.index(low)
        best = [i for i, c in enumerate(costs) if c == low]
        return best[int(self._rng.integers(len(best)))]

    def _sample(self, costs: npt.NDArray[np.float64]) -> int:
        """A worker drawn with probability ``exp(-normalised cost / temperature)``."""
        span = costs.max() - costs.min()
        z = (costs - costs.min()) / span if span > 0 else np.zeros_like(costs)
        p = np.exp(-z / self.temperature)
        return int(self._rng.choice(len(costs), p=p / p.sum()))


class KvLoadScan(Stateless):
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
