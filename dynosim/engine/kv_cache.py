"""Paged KV blocks of one engine worker, with prefix caching and LRU eviction.

Only counts of blocks are kept, never block identities: ``free`` blocks hold nothing,
``evictable`` units are cached prefixes no running request uses (kept in LRU order, evicted
whole), and every other block belongs to a running request. Prefix caching works at the
granularity of the workload's prompt hash ids (``HASH_BLOCK_TOKENS`` tokens, i.e.
``unit_blocks`` engine blocks): a unit is cached once a request has computed all its tokens.
A partial trailing unit is never cached (the real engine would cache its full blocks; the
difference is at most one unit per prompt).

The LRU order is a plain list, ``_lru``, of units in the order they became evictable (their
last reference released), oldest at ``_head``. An evictable unit's entry in ``_refs`` is not a
count but its place in that list (``~position``, negative; ``_lru[0]`` is at position
``_base``, as compaction drops leading entries), so acquiring it again overwrites its entry
with ``None`` (a tombstone) in O(1), and an allocation evicts the next units from ``_head``
with one slice (skipping tombstones), telling a listener all of them in one KV event. This is
the order an ``OrderedDict`` of evictable units would keep, without its per-unit linked-list
and hash-table work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from dynosim.types import HASH_BLOCK_TOKENS

# Compaction thresholds of the LRU list: evicted entries below ``_head`` and tombstones are
# dropped once they are this many and at least half the list (amortised O(1) an operation).
_SLACK = 1024


class PrefixKVCache:
    """Block accounting and prefix cache of one worker.

    Invariant (``check``): ``free + evictable_blocks + used == total_blocks`` where ``used`` is
    what running requests hold, and every evictable unit is unreferenced.
    """

    __slots__ = (
        "_base",
        "_head",
        "_lru",
        "_refs",
        "_tombs",
        "evictable_blocks",
        "free",
        "on_evict",
        "on_store",
        "total_blocks",
        "unit_blocks",
    )

    def __init__(self, total_blocks: int, block_size: int) -> None:
        if total_blocks < 1:
            raise ValueError(f"total_blocks must be >= 1, got {total_blocks}")
        self.total_blocks = total_blocks
        self.unit_blocks = HASH_BLOCK_TOKENS // block_size
        self.free = total_blocks
        self.evictable_blocks = 0
        # Every cached unit: its reference count (>= 1) if running requests hold it, else
        # ~(its position in the LRU order).
        self._refs: dict[int, int] = {}
        self._lru: list[int | None] = []  # _lru[p - _base]: the unit at position p, or None
        self._base = 0
        self._head = 0  # index in _lru of the oldest entry not evicted
        self._tombs = 0  # None entries at or after _head
        # KV events (what a Dynamo worker publishes to the router's indexer): told the units
        # cached (stored) and the units dropped (evicted), in order, as they happen; None:
        # nobody listens.
        self.on_store: Callable[[Sequence[int]], None] | None = None
        self.on_evict: Callable[[Sequence[int]], None] | None = None

    def cached(self) -> list[int]:
        """Every cached unit (referenced or evictable), in no particular order."""
        return list(self._refs)

    @property
    def available(self) -> int:
        """Blocks an allocation can get now (free plus evictable)."""
        return self.free + self.evictable_blocks

    @property
    def used(self) -> int:
        """Blocks held by running requests."""
        return self.total_blocks - self.free - self.evictable_blocks

    def match(self, hashes: Sequence[int], limit: int) -> int:
        """Number of leading units of ``hashes[:limit]`` that are cached."""
        refs = self._refs
        n = 0
        for h in hashes[:limit]:
            if h not in refs:
                break
            n += 1
        return n

    def evictable_among(self, hashes: Sequence[int]) -> int:
        """How many of these cached units are currently evictable (unreferenced)."""
        refs = self._refs
        n = 0
        for h in hashes:  # a loop: no generator per call
            if refs[h] < 0:
                n += 1
        return n

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take a reference on cached units (a prefix hit); they stop being evictable."""
        refs, lru, base = self._refs, self._lru, self._base
        pinned = 0
        for h in hashes:
            r = refs[h]
            if r < 0:
                lru[~r - base] = None
                pinned += 1
                refs[h] = 1
            else:
                refs[h] = r + 1
        if pinned:
            self.evictable_blocks -= pinned * self.unit_blocks
            self._tombs += pinned
            if self._tombs > _SLACK and 2 * self._tombs > len(lru) - self._head:
                self._compact()

    def allocate(self, n_blocks: int) -> None:
        """Give ``n_blocks`` to a running request, evicting least recently used units if needed.

        The caller checks ``available`` first; asking for more is a bug.
        """
        short = n_blocks - self.free
        if short > 0:
            if short > self.evictable_blocks:
                raise RuntimeError(f"KV over-allocation: {n_blocks} > {self.available}")
            unit = self.unit_blocks
            evicted = -(-short // unit)
            lru, head = self._lru, self._head
            end = head + evicted
            victims = lru[head:end]
            if self._tombs:
                skipped = victims.count(None)
                if skipped:  # acquired since they were released: take as many more
                    self._tombs -= skipped
                    while skipped:
                        more = lru[end : end + skipped]
                        end += skipped
                        victims += more
                        skipped = more.count(None)
                        self._tombs -= skipped
                    victims = [h for h in victims if h is not None]
            hashes: list[int] = victims  # type: ignore[assignment]  # no tombstone left (no cast call)
            refs = self._refs
            for h in hashes:
                del refs[h]
            if self.on_evict is not None:
                self.on_evict(hashes)
            self._head = end
            if end > _SLACK and 2 * end > len(lru):
                del lru[:end]
                self._base += end
                self._head = 0
            self.free += evicted * unit
            self.evictable_blocks -= evicted * unit
        self.free -= n_blocks

    def register(self, h: int) -> bool:
        """Cache a unit a request just finished computing; False if it is cached already."""
        if h in self._refs:
            return False
        self._refs[h] = 1
        if self.on_store is not None:
            self.on_store((h,))
        return True

    def register_all(self, hashes: Sequence[int]) -> list[int]:
        """:meth:`register` each unit in turn; the ones that were not cached yet."""
        refs = self._refs
        new: list[int] = []
        for h in hashes:
            if h not in refs:
                refs[h] = 1
                new.append(h)
        if new and self.on_store is not None:
            self.on_store(new)
        return new

    def release(self, units: Sequence[int], blocks: int) -> None:
        """Return a request's ``blocks``, of which ``units`` are cached units it references.

        Units are released last-first, so a prompt's tail is evicted before its head.
        """
        refs, lru = self._refs, self._lru
        n0 = len(lru)
        pos = ~(self._base + n0)  # ~position of the next entry
        append = lru.append
        for h in reversed(units):
            r = refs[h]
            if r == 1:
                refs[h] = pos
                pos -= 1
                append(h)
            else:
                refs[h] = r - 1
        self.evictable_blocks += (len(lru) - n0) * self.unit_blocks
        self.free += blocks - len(units) * self.unit_blocks

    def _compact(self) -> None:
        """Drop the evicted entries and the tombstones of the LRU list (renumbering)."""
        live = [h for h in self._lru[self._head :] if h is not None]
        refs = self._refs
        for i, h in enumerate(live):
            refs[h] = ~i
        self._lru = cast("list[int | None]", live)
        self._base = self._head = self._tombs = 0

    def check(self) -> None:
        """Assert the accounting invariants (used by tests)."""
        assert 0 <= self.free <= self.total_blocks
        live = [h for h in self._lru[self._head :] if h is not None]
        assert self._tombs == len(self._lru) - self._head - len(live)
        assert self.evictable_blocks == len(live) * self.unit_blocks
        for i, h in enumerate(self._lru):
            if h is not None and i >= self._head:
                assert self._refs[h] == ~(self._base + i)
        assert sum(1 for r in self._refs.values() if r < 0) == len(live)
        assert all(r != 0 for r in self._refs.values())
        assert self.used >= 0
