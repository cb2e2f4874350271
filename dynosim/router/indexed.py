"""Routers that read a few workers per decision: least_loaded, kv_load and kv_aware.

Each keeps a :class:`LoadIndex` of its workers' load terms (and kv_aware a :class:`BlockIndex`
of their cached units) and picks exactly the worker the scanning routers of
:mod:`dynosim.router.reference` pick, with the same random draws: O(prompt blocks + workers
caching the prompt's first unit + log workers) per request instead of O(workers x blocks).

Exactness rests on three facts. (1) Syncing a fast-forwarded worker only adds held blocks, and
syncing at once what several syncs would do evicts the same units, so a worker's recorded
terms are a lower bound of its terms now and only the workers whose lower bound could reach
the best exact cost need a sync. (2) Two workers with equal terms cost the same for any
request, so a group's cost is computed once. (3) The scan breaks a tie with one draw over the
tied workers in index order; counting a group's members and bisecting for the k-th gives the
same worker without listing them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from itertools import pairwise
from typing import Any

import numpy as np

from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.router.base import Router, kv_cost
from dynosim.router.index import BlockIndex, Group, LoadIndex, kth
from dynosim.router.reference import KvAwareScan, KvLoadScan, LeastLoadedScan
from dynosim.types import HASH_BLOCK_TOKENS

_REL = 1e-9
"""Relative margin between a group's ordering key and its cost: both are sums of the same
few non-negative terms, so they differ by a few ulps (~1e-16 relative); a worker is skipped
only when its key is further than this above the best cost."""


SCAN_MAX = 16
"""Every router here scans pools up to this size (the same picks and draws; keeping the indexes
costs more than reading a few workers: kv_aware on 8 workers of the Mooncake trace, 0.145 ms a
request scanning, 0.178 ms indexed; least_loaded as the decode router of 4 + 4 disaggregated
workers: 0.4% fewer instructions for a whole 3,000-request Mooncake process scanning, under
callgrind). A pool that grows past it (a planner) starts the indexes from its state."""

SORT_MAX = 64
"""Hit levels up to this size are sorted by state; larger ones are read off the load index."""

_INF = float("inf")
_Cost = Callable[[int, int, int, int], float]
"""``kv_cost`` with the router's weight, the request's prompt and the block size bound."""


class _Indexed:
    """Keeps the load index in step with the list of workers the router is given.

    A pool of at most :data:`SCAN_MAX` workers is read whole by the router's scan (``_scan``,
    from :mod:`dynosim.router.reference`: the same picks and draws); a larger one through the
    indexes (``_route``).
    """

    _scan: Router

    def __init__(self) -> None:
        self._load = LoadIndex(self._state)
        self._list: Sequence[EngineWorker] | None = None
        self._n = -1
        self._pos: dict[int, int] = {}  # worker index -> position in ``_list``

    def _state(self, w: EngineWorker) -> tuple[Any, ...]:
        raise NotImplementedError

    def workers_changed(self) -> None:
        """The pool changed its list in place: re-read it at the next decision."""
        self._list = None

    _scan_always = False
    """Every decision reads every worker, whatever the pool's size (kv_aware sampling)."""

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """The worker the scan picks: by the scan in a small pool, else from the indexes."""
        if len(workers) <= SCAN_MAX or self._scan_always:
            return self._scan.route(rr, workers, now_us)
        self._prepare(workers)
        return self._route(rr, workers, now_us)

    def _route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        raise NotImplementedError

    def _prepare(self, workers: Sequence[EngineWorker]) -> None:
        if workers is not self._list or len(workers) != self._n:
            if any(a.index >= b.index for a, b in pairwise(workers)):
                raise ValueError("routed workers must be in ascending index order")
            self._load.reset(workers)
            self._list, self._n = workers, len(workers)
            self._pos = {w.index: p for p, w in enumerate(workers)}
        self._load.refresh()

    def _pick(self, workers: Sequence[EngineWorker], index: int) -> int:
        """Position of worker ``index`` in ``workers``; it will change, so it is re-read."""
        self._load.workers[index].touch()
        return self._pos[index]


class LeastLoaded(_Indexed):
    """The worker with the fewest outstanding requests (ties: fewer KV blocks, then index).

    As the scan (:class:`~dynosim.router.reference.LeastLoadedScan`) it syncs nothing when one
    worker has the fewest requests, else it brings up to date the tied workers whose KV could
    still decide (the scan syncs them all: the others' syncs change nothing observable).
    """

    _scan = LeastLoadedScan()

    def __init__(self, *, sync_ties: bool = False) -> None:
        """``sync_ties``: sync every tied worker of a small pool, as the scan does.

        For a pool whose caller reads the picked worker's prefix cache without a sync
        (conditional disaggregation): its KV must be what the scan's syncs left. Otherwise a
        small pool syncs nothing when the bounds of the tied workers' KV decide.
        """
        super().__init__()
        self._sync_ties = sync_ties

    def _state(self, w: EngineWorker) -> tuple[Any, ...]:
        # (w.outstanding, w.kv_load_blocks) without the property calls (a state per update)
        kv = w.kv
        used = kv.total_blocks - kv.free - kv.evictable_blocks
        n = len(w.running) + len(w.waiting) + len(w.inbox) + w.incoming
        return (n, used + w.pending_prefill / w.block_size + w.incoming_blocks)

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """The worker the scan picks: by the scan in a small pool, else from the indexes."""
        if len(workers) > SCAN_MAX:
            self._prepare(workers)
            return self._route(rr, workers, now_us)
        if self._sync_ties:
            return self._scan.route(rr, workers, now_us)
        low, tied = 1 << 62, []
        for i, w in enumerate(workers):
            n = len(w.running) + len(w.waiting) + len(w.inbox) + w.incoming  # w.outstanding
            if n < low:
                low, tied = n, [i]
            elif n == low:
                tied.append(i)
        if len(tied) == 1:
            return tied[0]
        # The KV tie-break from each tied worker's bounds (lowest upper bound first): a sync
        # only raises a worker's KV (by at most a block per decoding request per block_size
        # segment steps), so one whose upper bound is below every other lower bound (or equal
        # to those of higher indices) is the scan's pick; else sync them all.
        c, top, lows = 0, _INF, []
        for t, i in enumerate(tied):
            lo, hi = workers[i].kv_load_range(now_us)
            lows.append(lo)
            if hi < top:
                c, top = t, hi
        for t, lo in enumerate(lows):
            if t != c and (lo < top or (lo == top and t < c)):
                return self._scan.route(rr, workers, now_us)
        return tied[c]

    def _route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Least-loaded worker."""
        load = self._load
        s = load.order[0]
        g = load.groups[s]
        if len(g.members) == 1 and (len(load.order) == 1 or load.order[1][0] != s[0]):
            return self._pick(workers, g.members[0])  # the only one with the fewest requests
        _, g = load.settled_first(now_us)
        return self._pick(workers, g.members[0])


class KvLoad(_Indexed):
    """The worker with the fewest active KV blocks: held, queued and arriving by transfer.

    Dynamo's KV router with the prefix-overlap term off, as it routes to decode workers
    (their caches hold no prompt to reuse); ties go to the lowest index.
    """

    _scan = KvLoadScan()

    def _state(self, w: EngineWorker) -> tuple[Any, ...]:
        kv = w.kv  # (w.kv_load_blocks,) without the property calls
        used = kv.total_blocks - kv.free - kv.evictable_blocks
        return (used + w.pending_prefill / w.block_size + w.incoming_blocks,)

    def _route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Least KV-loaded worker."""
        _, g = self._load.settled_first(now_us)
        return self._pick(workers, g.members[0])


class KvAware(_Indexed):
    """Dynamo's KV-aware cost, lowest first (:func:`~dynosim.router.base.kv_cost`).

    The workers caching the prompt's first unit (from the block index) are synced and costed
    one by one; every other worker has no prefix hit, so its cost depends on its load terms
    only, and the groups are visited in ascending order of ``used + (1 + weight) * queued``
    until that key passes the best cost found. ``temperature > 0`` samples over every worker's
    cost, and a pool of at most :data:`SCAN_MAX` workers is cheaper to read whole: both keep
    the scan (:class:`~dynosim.router.reference.KvAwareScan`, same picks, same draws).
    """

    def __init__(self, overlap_weight: float, temperature: float, rng: np.random.Generator) -> None:
        super().__init__()
        self.overlap_weight = overlap_weight
        self.temperature = temperature
        self._rng = rng
        self._scan = KvAwareScan(overlap_weight, temperature, rng)
        self._scan_always = temperature > 0  # sampling needs every worker's cost
        self._blocks = BlockIndex()
        self._only_routed = True  # the block index holds only the routed workers

    def _state(self, w: EngineWorker) -> tuple[Any, ...]:
        kv = w.kv  # kv.used, inline
        used, pending = kv.total_blocks - kv.free - kv.evictable_blocks, w.pending_prefill
        return (used + (1 + self.overlap_weight) * (pending / w.block_size), used, pending)

    def _prepare(self, workers: Sequence[EngineWorker]) -> None:
        if workers is not self._list or len(workers) != self._n:
            for w in workers:
                if w.block_size != workers[0].block_size:
                    raise ValueError("routed workers must share one block size")
                self._blocks.attach(w)
            super()._prepare(workers)
            self._only_routed = self._blocks.attached == self._load.workers.keys()
        else:
            super()._prepare(workers)

    def _route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        """Lowest-cost worker."""
        hashes, target = rr.hashes, rr.target
        limit = min(len(hashes), (target - 1) // HASH_BLOCK_TOKENS)
        w0 = workers[0]
        cost = partial(kv_cost, self.overlap_weight, target, w0.block_size)
        unit = w0.kv.unit_blocks
        cands, exact, cand_best = self._candidates(hashes, limit, cost, unit, now_us)
        best, groups, minus = self._scan_groups(cands, cand_best, cost, unit, now_us)
        # Ties in index order: tied candidates, and the other members of the tied groups.
        plus = [i for i, c in exact.items() if c == best] if best == cand_best else []
        if len(plus) > 1:
            plus.sort()
        n = len(plus) - len(minus) + sum([len(g.members) for g in groups])
        k = 0 if n == 1 else int(self._rng.integers(n))
        return self._pick(workers, kth(k, groups, minus, plus))

    def _candidates(
        self, hashes: Sequence[int], limit: int, cost: _Cost, unit: int, now_us: int
    ) -> tuple[set[int], dict[int, float], float]:
        """The workers caching the prompt's first unit, the exact costs of those that count.

        And the lowest of these costs. Their prefix hits come from the block index in one walk
        over the prompt (the set of workers holding the first ``d`` units shrinks as ``d``
        grows, as Dynamo's inverted index finds overlaps). Within each hit depth the workers are
        visited in ascending recorded key; a lagging one is synced (its hit may drop, its load
        rise) and costed exactly; the visit of a depth stops where even the recorded terms
        cannot reach the best cost so far.
        """
        load = self._load
        if limit <= 0:
            return set(), {}, _INF
        blocks = self._blocks
        h = hashes[0]
        cands = blocks.holders(h) if self._only_routed else blocks.holding(h, load.workers.keys())
        shared = self._only_routed  # cands may be the index's set: copied before a sync changes it
        levels: list[tuple[int, set[int]]] = []
        level, d = cands, 1
        while level and d < limit:
            deeper = blocks.holding(hashes[d], level)
            if len(deeper) < len(level):
                levels.append((d, level - deeper))
            level, d = deeper, d + 1
        if level:
            levels.append((d, level))
        best, exact = _INF, {}
        group_of = load.group_of
        for d, level in reversed(levels):  # deepest first: the cheapest prefill
            low = cost(d, unit, 0, 0)  # the cost's part that is not load
            for i in self._ascending(level):
                s = group_of[i].state
                if (low + s[0]) * (1 - _REL) - _REL > best:
                    break
                w = load.workers[i]
                if w.lags(now_us):
                    if shared:
                        cands, shared = set(cands), False
                    w.sync(now_us)
                    c = cost(w.kv.match(hashes, limit), unit, w.kv.used, w.pending_prefill)
                else:
                    c = cost(d, unit, s[1], s[2])
                exact[i] = c
                best = min(best, c)
        load.refresh()
        return cands, exact, best

    def _ascending(self, level: set[int]) -> Iterator[int]:
        """The workers of ``level`` in ascending recorded state.

        A small level is sorted; a large one (a prefix most workers cache, such as a shared
        system prompt) is read off the load index's groups in order, so that the caller's
        early stop leaves most of it unread instead of sorting it all.
        """
        load = self._load
        if len(level) <= SORT_MAX:
            # By the first term only (a float: it sorts several times faster than the states):
            # workers with equal first terms are visited or passed over together, whatever
            # their order (the stop compares that term), so the costs found are the same.
            yield from sorted(level, key=load.first.__getitem__)
            return
        groups = load.groups
        for s in load.order:  # not changed while the caller reads (it syncs, then refreshes)
            for i in groups[s].members:
                if i in level:
                    yield i

    def _among(self, cands: set[int], g: Group) -> list[int]:
        """The candidates in group ``g``, from the smaller side."""
        if len(cands) <= len(g.members):
            group_of = self._load.group_of
            return [i for i in cands if group_of[i] is g]
        return [i for i in g.members if i in cands]

    def _scan_groups(
        self, cands: set[int], cand_best: float, cost: _Cost, unit: int, now_us: int
    ) -> tuple[float, list[Group], list[int]]:
        """The lowest cost, the groups of non-candidates that have it, the candidates among them.

        The candidates come ascending (the groups' members to leave out of the tie). Groups are
        visited in ascending key order while their key could reach the best cost; a lagging
        non-candidate of such a group is synced (its key rises) and the walk restarts.
        """
        load = self._load
        low = cost(0, unit, 0, 0)
        groups = load.groups
        while True:
            best: float = cand_best
            tied: list[Group] = []
            minus: list[int] = []
            restart = False
            for s in load.order:  # left at once if a sync changes it
                if (low + s[0]) * (1 - _REL) - _REL > best:
                    break
                g = groups[s]
                among = self._among(cands, g) if cands else []
                if len(among) == len(g.members):
                    continue  # candidates only: costed above
                lag = [w for w in load.lagging(g, now_us) if w.index not in cands]
                if lag:
                    load.settle(lag, now_us)
                    restart = True
                    break
                c = cost(0, unit, s[1], s[2])
                if c < best:
                    best, tied, minus = c, [g], among
                elif c == best:
                    tied.append(g)
                    minus = minus + among
            if not restart:
                minus.sort()
                return best, tied, minus
