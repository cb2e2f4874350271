"""What a router keeps about its workers so that a decision does not read them all.

* :class:`BlockIndex`: which workers cache each prompt unit, fed by the workers' KV events
  (a unit stored when a request finished computing it, a unit removed when an allocation
  evicted it). It is Dynamo's KV indexer reduced to what the simulator needs: in Dynamo each
  engine publishes ``Store``/``Remove`` events to the router's global index (an inverted
  index keyed by block hash, then a radix tree and a positional index), and a request's
  lookup walks its block hashes once to get each worker's overlap instead of asking every
  worker (ai-dynamo/dynamo ``docs/blogs/flash-indexer/flash-indexer.md``, sections 1.2 and 3;
  ``lib/kv-router``). What the router sees of a worker mid-step is what that worker has
  published: units computed by steps that ended, evictions of the allocations made so far.
  Here the index has the same view, since the simulator applies the KV events when the worker
  does; a fast-forwarded worker's pending evictions are applied when it is synced, so for it
  the index is a superset of the cache at ``now`` (syncing only ever evicts).
* :class:`LoadIndex`: each worker's load terms, kept ordered as they change. Workers with the
  same terms form one group (their costs are equal, whatever the request), so the many idle
  workers of a large cluster are one entry, and ties are counted without listing them.
  Workers tell their router when their terms may have changed (:meth:`EngineWorker.touch`);
  the router re-reads those at its next decision. A fast-forwarded worker's terms lag: syncing
  it only ever adds held blocks, so its recorded key is a lower bound of its key now.

Both orders are plain lists kept sorted with :mod:`bisect`: O(log n) comparisons and one
memmove per change, which below ~10^5 entries costs less than any balanced tree in Python.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Hashable, Iterable, KeysView, Sequence
from typing import Any, TypeVar

from dynosim.engine.worker import EngineWorker

S = TypeVar("S", bound=Hashable)


class BlockIndex:
    """``unit hash -> indices of the workers caching it``, kept by the workers' KV events.

    A unit one worker caches (a prompt's own tail: most units of a large cluster) maps to that
    worker's index, not to a set of one: no set to make, keep and free per unit stored.
    """

    def __init__(self) -> None:
        self._holders: dict[int, int | set[int]] = {}
        self.attached: set[int] = set()  # indices of the workers listened to

    def attach(self, w: EngineWorker) -> None:
        """Listen to ``w``'s KV events (once), starting from what it caches now."""
        if w.index in self.attached:
            return
        self.attached.add(w.index)
        holders, i = self._holders, w.index

        def stored(hashes: Iterable[int]) -> None:
            for h in hashes:
                s = holders.get(h)
                if s is None:
                    holders[h] = i
                elif isinstance(s, int):
                    holders[h] = {s, i}  # a worker stores only units it does not cache
                else:
                    s.add(i)

        def evicted(hashes: Iterable[int]) -> None:
            for h in hashes:
                s = holders[h]
                if isinstance(s, int):
                    del holders[h]
                else:
                    s.discard(i)
                    if not s:
                        del holders[h]

        stored(w.kv.cached())
        w.kv.on_store = stored
        w.kv.on_evict = evicted

    def holders(self, h: int) -> set[int]:
        """Indices of the workers caching unit ``h``.

        The index's own set (do not change it; the next KV event of one of them may) or a new one.
        """
        s = self._holders.get(h)
        if s is None:
            return set()
        return {s} if isinstance(s, int) else s

    def holding(self, h: int, among: set[int] | KeysView[int]) -> set[int]:
        """The workers of ``among`` caching unit ``h`` (a new set)."""
        s = self._holders.get(h)
        if s is None:
            return set()
        if isinstance(s, int):
            return {s} if s in among else set()
        return among & s


class Group:
    """Workers with the same load terms: their indices, and those inside a lagging segment."""

    __slots__ = ("members", "segment", "state")

    def __init__(self, state: tuple[Any, ...] = ()) -> None:
        self.state = state  # the terms, as first recorded (the key of ``LoadIndex.groups``)
        self.members: list[int] = []  # worker indices, ascending
        self.segment: set[int] = set()  # members whose fast-forwarded KV may lag


class LoadIndex:
    """Groups of workers by load terms (``state(worker)``), the groups in ascending order.

    ``state`` must return a tuple whose order is the routers' order (lowest first) and which
    is equal for two workers exactly when the router cannot tell them apart.
    """

    def __init__(self, state: Callable[[EngineWorker], tuple[Any, ...]]) -> None:
        self._state = state
        self.workers: dict[int, EngineWorker] = {}
        self.order: list[tuple[Any, ...]] = []  # the states with members, ascending
        self.groups: dict[tuple[Any, ...], Group] = {}
        # Each worker's group (its state is the group's ``state``; membership is an identity
        # test, with no state to hash or compare).
        self.group_of: dict[int, Group] = {}
        self.first: dict[int, Any] = {}  # each worker's first term (a key that sorts fast)
        self.changed: list[EngineWorker] = []  # what the workers append to (``watch``)

    def __len__(self) -> int:
        return len(self.workers)

    def reset(self, workers: Sequence[EngineWorker]) -> None:
        """Track exactly ``workers`` (a pool added or drained some): O(workers), rarely."""
        new = {w.index: w for w in workers}
        for i in [i for i in self.workers if i not in new]:
            self._leave(i, self.group_of.pop(i))
            del self.first[i]
            w = self.workers.pop(i)
            if w.watch is self.changed:
                w.watch = None
        for i, w in new.items():
            if i not in self.workers:
                self.workers[i] = w
                w.watch = self.changed
                w.touched = False
                self.update(w)

    def refresh(self) -> None:
        """Re-read every worker that changed since the last refresh."""
        changed = self.changed
        if not changed:
            return
        workers = self.workers
        for w in changed:
            w.touched = False
            if workers.get(w.index) is w:
                self.update(w)
        changed.clear()

    def update(self, w: EngineWorker) -> None:
        """Move ``w`` to the group of its current state."""
        i = w.index
        s = self._state(w)
        g = self.group_of.get(i)
        if g is None or g.state != s:
            groups, order = self.groups, self.order
            new = groups.get(s)
            if new is None and g is not None and len(g.members) == 1:
                # Alone in its group and alone in the new state (the common move in a large
                # cluster, where few workers share a state): the same group, re-keyed.
                old = g.state
                del groups[old]
                at = bisect_left(order, old)
                # A small change of load often keeps the state between the same neighbours:
                # then it takes the old one's slot (two comparisons, no memmove).
                if (at == 0 or order[at - 1] < s) and (at + 1 == len(order) or s < order[at + 1]):
                    order[at] = s
                else:
                    del order[at]
                    insort(order, s)
                g.state = s
                groups[s] = g
                self.first[i] = s[0]
            else:
                if g is not None:
                    self._leave(i, g)
                if new is None:
                    new = groups[s] = Group(s)
                    insort(order, s)
                g = new
                self.group_of[i] = g
                self.first[i] = s[0]
                insort(g.members, i)
        if w.in_segment:
            g.segment.add(i)
        else:
            g.segment.discard(i)

    def _leave(self, i: int, g: Group) -> None:
        """Take ``i`` out of its group ``g`` (the caller sets or drops its entries)."""
        members = g.members
        del members[bisect_left(members, i)]
        g.segment.discard(i)
        if not members:
            s = g.state
            del self.groups[s]
            order = self.order
            del order[bisect_left(order, s)]

    def lagging(self, g: Group, now_us: int) -> list[EngineWorker]:
        """Members of ``g`` whose KV a sync at ``now_us`` would change."""
        workers = self.workers
        return [workers[i] for i in g.segment if workers[i].lags(now_us)]

    def settle(self, ws: Sequence[EngineWorker], now_us: int) -> None:
        """Sync ``ws`` to ``now_us`` and re-read them."""
        for w in ws:
            w.sync(now_us)
        self.refresh()

    def settled_first(self, now_us: int) -> tuple[tuple[Any, ...], Group]:
        """The lowest state with its group, after syncing the lagging workers that could be in it.

        Syncing only raises a state, so once the lowest group has no lagging member no lagging
        worker elsewhere can reach or undercut it.
        """
        while True:
            s = self.order[0]
            g = self.groups[s]
            lag = self.lagging(g, now_us)
            if not lag:
                return s, g
            self.settle(lag, now_us)


def kth(k: int, groups: Sequence[Group], minus: Sequence[int], plus: Sequence[int]) -> int:
    """The ``k``-th smallest (from 0) of ``union(members) - minus + plus``.

    ``minus`` (sorted) are members of the groups to leave out, ``plus`` (sorted) indices in no
    group to add. A bisection on the worker index: O(log(index) x groups x log(members)).
    """
    if not groups:  # tied candidates only (idle workers caching the prompt, say)
        return int(plus[k])
    if len(groups) == 1 and not minus and not plus:
        return int(groups[0].members[k])
    lo, hi = 0, max([int(g.members[-1]) for g in groups] + list(plus))
    while lo < hi:  # the smallest x with more than k elements <= x
        mid = (lo + hi) // 2
        n = sum(bisect_right(g.members, mid) for g in groups)
        n += bisect_right(plus, mid) - bisect_right(minus, mid)
        if n > k:
            hi = mid
        else:
            lo = mid + 1
    return lo
