"""Paged KV blocks of one engine worker, with prefix caching and LRU eviction.

Only counts of blocks are kept, never block identities: ``free`` blocks hold nothing,
``evictable`` units are cached prefixes no running request uses (kept in LRU order, evicted
whole), and every other block belongs to a running request. Prefix caching works at the
granularity of the workload's prompt hash ids (``HASH_BLOCK_TOKENS`` tokens, i.e.
``unit_blocks`` engine blocks): a unit is cached once a request has computed all its tokens.
A partial trailing unit is never cached (the real engine would cache its full blocks; the
difference is at most one unit per prompt).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from dynosim.types import HASH_BLOCK_TOKENS


class PrefixKVCache:
    """Block accounting and prefix cache of one worker.

    Invariant (``check``): ``free + evictable_blocks + used == total_blocks`` where ``used`` is
    what running requests hold, and every evictable unit has reference count 0.
    """

    __slots__ = (
        "_evictable",
        "_refs",
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
        self._refs: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        # KV events (what a Dynamo worker publishes to the router's indexer): told the units
        # cached (stored) and the units dropped (evicted), as they happen; None: nobody listens.
        self.on_store: Callable[[Sequence[int]], None] | None = None
        self.on_evict: Callable[[int], None] | None = None

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
        ev = self._evictable
        return sum(1 for h in hashes if h in ev)

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take a reference on cached units (a prefix hit); they stop being evictable."""
        refs, ev = self._refs, self._evictable
        for h in hashes:
            r = refs[h]
            if r == 0:
                del ev[h]
                self.evictable_blocks -= self.unit_blocks
            refs[h] = r + 1

    def allocate(self, n_blocks: int) -> None:
        """Give ``n_blocks`` to a running request, evicting least recently used units if needed.

        The caller checks ``available`` first; asking for more is a bug.
        """
        short = n_blocks - self.free
        if short > 0:
            if short > self.evictable_blocks:
                raise RuntimeError(f"KV over-allocation: {n_blocks} > {self.available}")
            ev, refs, unit = self._evictable, self._refs, self.unit_blocks
            evicted = -(-short // unit)
            on_evict, pop = self.on_evict, ev.popitem
            if on_evict is None:  # most allocations evict: the tight loop without a listener
                for _ in range(evicted):
                    del refs[pop(False)[0]]
            else:
                for _ in range(evicted):
                    h = pop(False)[0]
                    del refs[h]
                    on_evict(h)
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
        refs, ev = self._refs, self._evictable
        freed = 0
        for h in reversed(units):
            r = refs[h] - 1
            refs[h] = r
            if r == 0:
                ev[h] = None
                freed += 1
        self.evictable_blocks += freed * self.unit_blocks
        self.free += blocks - len(units) * self.unit_blocks

    def check(self) -> None:
        """Assert the accounting invariants (used by tests)."""
        assert 0 <= self.free <= self.total_blocks
        assert self.evictable_blocks == len(self._evictable) * self.unit_blocks
        assert all(self._refs[h] == 0 for h in self._evictable)
        assert sum(1 for r in self._refs.values() if r == 0) == len(self._evictable)
        assert self.used >= 0
