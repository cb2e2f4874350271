"""The router's indexes on hand-computed cases: KV events, groups of equal load, the k-th tie."""

from __future__ import annotations

import simpy

from dynosim.config import EngineConfig
from dynosim.engine.kv_cache import PrefixKVCache
from dynosim.engine.policies import VllmWorker
from dynosim.engine.worker import EngineWorker
from dynosim.perf.linear import LinearStepTime
from dynosim.router.index import BlockIndex, Group, LoadIndex, kth


def _worker(i: int, blocks: int = 64) -> EngineWorker:
    engine = EngineConfig(block_size=64)
    return VllmWorker(i, simpy.Environment(), engine=engine, kv=PrefixKVCache(blocks, 64),
                      timing=LinearStepTime(), on_finish=lambda rr, t: None)  # fmt: skip


def test_block_index_follows_store_and_evict_events() -> None:
    a, b = _worker(0, blocks=32), _worker(1, blocks=32)  # 8 blocks a unit: four units each
    b.kv.register(7)  # cached before the index listens: seeded on attach
    index = BlockIndex()
    index.attach(a)
    index.attach(b)
    a.kv.allocate(24)  # a request's 24 blocks, whose three units it then computes
    assert a.kv.register_all([7, 8, 9]) == [7, 8, 9]
    assert index.holders(7) == {0, 1}
    assert index.holders(9) == {0}
    a.kv.release([7, 8, 9], 24)  # evictable, tail first in LRU order: 9, 8, 7; 8 blocks free
    a.kv.allocate(20)  # 12 short: evicts ceil(12 / 8) = 2 units, 9 then 8
    assert index.holders(9) == set()
    assert index.holders(8) == set()
    assert index.holders(7) == {0, 1}


def test_load_index_groups_equal_states_and_orders_them() -> None:
    ws = [_worker(i) for i in range(5)]
    load = {0: 3, 1: 0, 2: 3, 3: 1, 4: 0}
    index = LoadIndex(lambda w: (load[w.index],))
    index.reset(ws)
    assert index.order == [(0,), (1,), (3,)]
    assert index.groups[(0,)].members == [1, 4]
    assert index.groups[(3,)].members == [0, 2]
    load[1] = 3  # worker 1 changes and tells: re-read at the next refresh only
    ws[1].touch()
    ws[1].touch()  # once is enough
    assert index.changed == [ws[1]]
    index.refresh()
    assert index.groups[(0,)].members == [4]
    assert index.groups[(3,)].members == [0, 1, 2]
    index.reset(ws[1:4])  # 0 and 4 leave (drained): the empty group goes too
    assert index.order == [(1,), (3,)]
    assert ws[0].watch is None
    assert ws[2].watch is index.changed


def _group(*members: int) -> Group:
    g = Group()
    g.members = list(members)
    return g


def test_kth_counts_groups_minus_and_plus_in_index_order() -> None:
    groups = [_group(2, 5, 9), _group(1, 7)]
    # union {1, 2, 5, 7, 9} - {5} + {4}: 1, 2, 4, 7, 9
    assert [kth(k, groups, [5], [4]) for k in range(5)] == [1, 2, 4, 7, 9]
    assert [kth(k, [_group(3, 6)], [], []) for k in range(2)] == [3, 6]
    assert kth(0, [], [], [11]) == 11
