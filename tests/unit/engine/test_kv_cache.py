from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
