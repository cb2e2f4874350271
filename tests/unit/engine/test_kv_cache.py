from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynosim.engine import kv_cache
from dynosim.engine.kv_cache import PrefixKVCache


def test_prefix_hits_survive_release_until_evicted_lru_first() -> None:
    kv = PrefixKVCache(total_blocks=32, block_size=128)  # 4 blocks per 512-token unit
    for h in (1, 2):
        assert kv.register(h)
    kv.allocate(8)
    kv.release([1, 2], 8)  # request done: both units become evictable, tail first
    assert kv.match([1, 2, 3], 3) == 2
    assert kv.free == 24
    assert kv.evictable_blocks == 8
    kv.allocate(28)  # needs one unit evicted: the tail (2) goes first
    assert kv.match([1, 2], 2) == 1
    kv.check()


def test_acquire_pins_units_against_eviction() -> None:
    kv = PrefixKVCache(total_blocks=8, block_size=128)
    kv.register(7)
    kv.allocate(4)
    kv.release([7], 4)
    kv.acquire([7])
    assert kv.available == 4
    with pytest.raises(RuntimeError):
        kv.allocate(5)
    kv.check()


def test_duplicate_registration_is_refused() -> None:
    kv = PrefixKVCache(total_blocks=8, block_size=512)
    assert kv.register(5)
    assert not kv.register(5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), max_size=60))
def test_random_operations_conserve_blocks(ops: list[tuple[int, int]]) -> None:
    kv = PrefixKVCache(total_blocks=40, block_size=256)  # 2 blocks per unit
    held: list[tuple[list[int], int]] = []
    for op, h in ops:
        if op == 0 and kv.available >= 2:
            units = [h] if kv.register(h) else []
            kv.allocate(2)
            held.append((units, 2))
        elif op == 1 and held:
            units, blocks = held.pop(0)
            kv.release(units, blocks)
        elif op == 2:
            n = kv.match([h], 1)
            pinned = kv.evictable_among([h][:n])
            if n and kv.available - 2 * pinned >= 1:
                kv.acquire([h])
                kv.allocate(1)
                held.append(([h], 3))
        elif op == 3 and kv.available >= h:
            kv.allocate(h)
            held.append(([], h))
        kv.check()
        # shared units count once: physical blocks = plain blocks + distinct referenced units
        plain = sum(b - 2 * len(u) for u, b in held)
        assert kv.used == plain + 2 * len({h for u, _ in held for h in u})


def test_a_unit_acquired_again_keeps_its_place_out_of_the_lru_order() -> None:
    kv = PrefixKVCache(total_blocks=16, block_size=256)  # 2 blocks per unit
    evicted: list[int] = []
    kv.on_evict = evicted.extend
    kv.allocate(8)
    kv.register_all([1, 2, 3, 4])
    kv.release([1, 2, 3, 4], 8)  # LRU order: 4, 3, 2, 1
    kv.acquire([4])  # a hit: its entry is a tombstone now
    kv.allocate(10)  # 2 blocks short: one unit goes, the oldest evictable
    assert evicted == [3]
    kv.release([4], 2 + 10)  # 4 is evictable again, newest: 2, 1, 4
    kv.allocate(16)  # 6 short: three units
    assert evicted == [3, 2, 1, 4]
    kv.check()


class _OrderedLRU:
    """The cache as an ``OrderedDict`` of evictable units: the order the LRU list must keep."""

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}
        self.ev: OrderedDict[int, None] = OrderedDict()

    def acquire(self, hashes: list[int]) -> None:
        for h in hashes:
            if self.refs[h] == 0:
                del self.ev[h]
            self.refs[h] += 1

    def evict(self, n: int) -> list[int]:
        out = [self.ev.popitem(last=False)[0] for _ in range(n)]
        for h in out:
            del self.refs[h]
        return out

    def release(self, hashes: list[int]) -> None:
        for h in reversed(hashes):
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.ev[h] = None


@pytest.mark.parametrize(("slack", "units"), [(1, 8), (1, 24), (3, 24), (1024, 8)])
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.integers(0, 9), max_size=5)),
        min_size=20,
        max_size=80,
    )
)
def test_eviction_order_is_least_recently_released_first(
    slack: int, units: int, ops: list[tuple[int, list[int]]]
) -> None:
    # Units released, re-acquired (tombstones) and evicted in any order, with the LRU list
    # compacted often (a small slack) or never, in a cache that evicts often or seldom: the
    # same units go, in the same order, as from an OrderedDict; the KV events say so.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kv_cache, "_SLACK", slack)
        _replay_against_ordered_dict(ops, units)


def _replay_against_ordered_dict(ops: list[tuple[int, list[int]]], units: int) -> None:
    kv = PrefixKVCache(total_blocks=2 * units, block_size=256)  # 2 blocks per unit, 10 hashes
    ref = _OrderedLRU()
    evicted: list[int] = []
    kv.on_evict = evicted.extend
    held: list[list[int]] = []
    for op, prompt in ops:
        hs = list(dict.fromkeys(prompt))
        if op == 0:  # a request: its cached prefix, then units it computes
            hit = kv.match(hs, len(hs))
            need = 2 * (len(hs) - hit)
            if kv.available - 2 * kv.evictable_among(hs[:hit]) < need:
                continue
            kv.acquire(hs[:hit])
            ref.acquire(hs[:hit])
            short = need - kv.free
            kv.allocate(need)
            want = ref.evict(-(-short // 2)) if short > 0 else []
            assert evicted == want
            evicted.clear()
            new = kv.register_all(hs[hit:])
            for h in new:
                ref.refs[h] = 1
            held.append(hs[:hit] + new)
            kv.release([], need - 2 * len(new))  # blocks of units cached already: freed
        elif op == 1 and held:
            units = held.pop(len(hs) % len(held))
            kv.release(units, 2 * len(units))
            ref.release(units)
        kv.check()
        assert sorted(kv.cached()) == sorted(ref.refs)
        assert kv.evictable_blocks == 2 * len(ref.ev)
