"""The indexed routers pick exactly what scanning every worker picks, with the same draws.

Two checks on seeded random clusters (tens to hundreds of workers, tiny KV pools that evict,
idle workers tied by the hundred, shared prefixes, bursts, planners adding and draining
workers, disaggregated pools with every decode router):

* decision by decision: a checking router asks the indexed router, then the scan
  (:mod:`dynosim.router.reference`) on the same workers with the same generator state, and
  both answers and the generator states after them must be equal;
* run by run: a whole simulation with the indexed routers and one with the scans give the
  same per-request records, bit for bit (the scans sync every worker at every decision, the
  indexed routers a few: syncing is exact whenever it happens).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from dynosim import DeploymentConfig, Request, Simulation
from dynosim.cluster import build
from dynosim.config import RouterName
from dynosim.engine.state import RunningRequest
from dynosim.engine.worker import EngineWorker
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.router import (
    ROUTERS,
    KvAware,
    KvAwareScan,
    KvLoadScan,
    LeastLoadedScan,
    Router,
    Stateless,
    indexed,
)
from dynosim.simulation import SimResult
from tests.conftest import assert_workers_empty, make_requests


def _scan(config: DeploymentConfig, rng: np.random.Generator, name: RouterName) -> Router:
    if name == "least_loaded":
        return LeastLoadedScan()
    if name == "kv_load":
        return KvLoadScan()
    if name == "kv_aware":
        kv = config.kv_router
        return KvAwareScan(kv.overlap_weight, kv.temperature, rng)
    return ROUTERS[name](config, rng)


class Checked(Stateless):
    """The indexed router's answer, asserted equal to the scan's on a share of decisions."""

    def __init__(self, config: DeploymentConfig, rng: np.random.Generator, name: RouterName):
        self.fast = ROUTERS[name](config, rng)
        self.rng = rng
        self.twin = np.random.default_rng()
        self.scan = _scan(config, self.twin, name)
        self.pick = random.Random(name)
        self.checked = 0

    def workers_changed(self) -> None:
        self.fast.workers_changed()

    def route(self, rr: RunningRequest, workers: Sequence[EngineWorker], now_us: int) -> int:
        before = self.rng.bit_generator.state
        i = self.fast.route(rr, workers, now_us)
        if self.pick.random() < 0.25:  # the scan syncs everything: leave lag to the index
            self.twin.bit_generator.state = before
            j = self.scan.route(rr, workers, now_us)
            assert i == j, (now_us, i, j)
            assert self.twin.bit_generator.state == self.rng.bit_generator.state
            self.checked += 1
        return i


def _perf(cfg: DeploymentConfig, blocks: dict[str, int]) -> dict[str, DeploymentPerf]:
    return {
        name: DeploymentPerf(LinearStepTime(), blocks[name], gpu_hour_usd=1.0,
                             kv_bytes_per_token=4096)
        for name, _ in cfg.pools()
    }  # fmt: skip


def _cluster(n: int) -> tuple[DeploymentConfig, list[Request], dict[str, int]]:
    """A random large cluster: many workers, small KV, shared prefixes, often a planner."""
    r = random.Random(500 + n)
    routers = ["least_loaded", "kv_aware", "kv_load"]
    engine = {
        "max_num_seqs": r.choice([2, 8, 64]),
        "max_num_batched_tokens": r.choice([512, 2048]),
        "block_size": r.choice([16, 64, 128]),
    }
    weight = r.choice([0.0, 1.0, 0.3, 7.0])
    data: dict[str, Any] = {"model": "x", "gpu": "h200_sxm", "router": r.choice(routers),
                            "kv_router": {"overlap_weight": weight}}  # fmt: skip
    workers = r.choice([40, 120, 300])
    if r.random() < 0.3:
        data |= {
            "mode": "disagg",
            "prefill": {"workers": workers // 2, "engine": engine},
            "decode": {"workers": workers // 2, "engine": engine},
            "decode_router": r.choice(routers),
            "max_local_prefill_tokens": r.choice([0, 600]),
        }
    else:
        data |= {"workers": workers, "engine": engine}
        if r.random() < 0.4:
            data["planner"] = {"policy": "load", "adjustment_interval_s": 0.2,
                               "metric_pulling_interval_s": 0.05, "startup_s": r.choice([0, 0.1]),
                               "min_workers": 1, "max_workers": workers + 20,
                               "kv_scale_up": 0.05, "kv_scale_down": 0.01,
                               "queue_scale_up": 0.2, "queue_scale_down": 0.1}  # fmt: skip
    cfg = DeploymentConfig.from_dict(data)
    reqs = make_requests(
        r.choice([300, 800]),
        rate_rps=workers * r.choice([2, 10, 40]),
        seed=n,
        input_range=(1, r.choice([600, 2000])),
        output_range=(1, r.choice([20, 200])),
        groups=r.choice([2, 16, 64]),
    )
    if r.random() < 0.4:  # bursts: many requests at one instant
        reqs = [replace(q, arrival_s=round(q.arrival_s, 1)) for q in reqs]
    kv = r.choice([300, 1000, 5000]) * 16 // engine["block_size"]
    return cfg, reqs, {name: kv for name, _ in cfg.pools()}


def _run(cfg: DeploymentConfig, reqs: list[Request], blocks: dict[str, int]) -> SimResult:
    sim = Simulation(cfg, reqs, perf=_perf(cfg, blocks))
    res = sim.run()
    assert_workers_empty(sim)
    return res


@pytest.mark.parametrize("n", range(24))
def test_indexed_router_decides_as_the_scan(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, reqs, blocks = _cluster(n)
    made: list[Checked] = []

    def checked(config: DeploymentConfig, rng: np.random.Generator, name: RouterName) -> Router:
        made.append(Checked(config, rng, name))
        return made[-1]

    monkeypatch.setattr(build, "make_router", checked)
    res = _run(cfg, reqs, blocks)
    assert res.metrics.completed_requests > 0
    assert sum(c.checked for c in made) > 25


@pytest.mark.parametrize("n", range(24, 32))
def test_indexed_runs_equal_scanning_runs(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, reqs, blocks = _cluster(n)
    fast = _run(cfg, reqs, blocks)
    monkeypatch.setattr(build, "make_router", _scan)
    slow = _run(cfg, reqs, blocks)
    assert fast.records.equal(slow.records)
    assert fast.metrics.scaling_events == slow.metrics.scaling_events


def test_idle_ties_draw_over_every_tied_worker() -> None:
    # 200 idle workers and a prompt nobody caches: every worker ties, and the draw (one
    # integer over 200) must land where the scan's does, whatever the seed.
    cfg = DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "workers": 200,
                                      "router": "kv_aware"})  # fmt: skip
    for seed in range(20):
        reqs = [Request(id=0, arrival_s=0.0, input_tokens=3000, output_tokens=5,
                        block_hashes=(1, 2, 3, 4, 5, 6))]  # fmt: skip
        sim = Simulation(cfg, reqs, perf=_perf(cfg, {"agg": 5000}), seed=seed)
        router = sim.entry.router
        assert isinstance(router, KvAware)
        rr = RunningRequest(reqs[0], prefix_caching=True)
        twin = np.random.default_rng()
        twin.bit_generator.state = sim.rng.bit_generator.state
        want = KvAwareScan(1.0, 0.0, twin).route(rr, sim.entry.active, 0)
        assert router.route(rr, sim.entry.active, 0) == want


@pytest.mark.parametrize("n", range(0, 24, 3))
def test_large_hit_levels_read_off_the_load_index(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same decisions when every hit level is walked through the load index, not sorted."""
    monkeypatch.setattr(indexed, "SORT_MAX", 0)
    test_indexed_router_decides_as_the_scan(n, monkeypatch)


@pytest.mark.parametrize(
    ("router", "cls"),
    [("kv_aware", indexed.KvAware), ("least_loaded", indexed.LeastLoaded),
     ("kv_load", indexed.KvLoad)],
)  # fmt: skip
def test_pools_crossing_the_scan_size_route_as_the_scan(
    router: str, cls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The indexed routers scan pools of at most SCAN_MAX workers and index larger ones: a
    planner that grows a pool across the line and drains it back switches between the two,
    same records."""
    cfg = DeploymentConfig.from_dict({
        "model": "x", "gpu": "h200_sxm", "router": router, "workers": 2,
        "engine": {"max_num_seqs": 8, "max_num_batched_tokens": 512, "block_size": 16},
        "planner": {"policy": "load", "adjustment_interval_s": 0.2,
                    "metric_pulling_interval_s": 0.05, "startup_s": 0.05, "min_workers": 1,
                    "max_workers": 60, "kv_scale_up": 0.05, "kv_scale_down": 0.01,
                    "queue_scale_up": 0.2, "queue_scale_down": 0.1},
    })  # fmt: skip
    reqs = make_requests(1500, rate_rps=400, seed=7, input_range=(1, 2000),
                         output_range=(1, 100), groups=8)  # fmt: skip
    blocks = {"agg": 300}
    sizes: set[int] = set()
    route = cls.route

    def counted(self: object, rr: RunningRequest, ws: Sequence[EngineWorker], now: int) -> int:
        sizes.add(len(ws))
        return int(route(self, rr, ws, now))

    monkeypatch.setattr(cls, "route", counted)
    fast = _run(cfg, reqs, blocks)
    assert min(sizes) <= indexed.SCAN_MAX < max(sizes)  # both ways of routing were used
    monkeypatch.setattr(build, "make_router", _scan)
    slow = _run(cfg, reqs, blocks)
    assert fast.records.equal(slow.records)
    assert fast.metrics.scaling_events == slow.metrics.scaling_events


@pytest.mark.parametrize("n", range(8))
def test_small_least_loaded_pools_decide_by_kv_bounds_as_the_scan(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """least_loaded on a pool of at most SCAN_MAX workers breaks ties on the tied workers' KV
    bounds instead of syncing them (decode pools of 2-8 workers behind 1-4 prefill workers, or
    aggregated pools, tiny KV, long outputs): the scan's picks, decision by decision and run by
    run, and most tie-breaks among lagging workers decided without a sync."""
    r = random.Random(900 + n)
    engine = {"max_num_seqs": r.choice([4, 16, 64]), "max_num_batched_tokens": 512,
              "block_size": r.choice([16, 32])}  # fmt: skip
    data: dict[str, Any] = {"model": "x", "gpu": "h200_sxm", "engine": engine}
    if n % 2:
        data |= {"workers": r.choice([2, 5, indexed.SCAN_MAX]), "router": "least_loaded"}
    else:
        data |= {"mode": "disagg", "prefill": {"workers": r.choice([1, 4])},
                 "decode": {"workers": r.choice([2, 4, 8])}, "decode_router": "least_loaded",
                 "router": r.choice(["random", "kv_aware"])}  # fmt: skip
    cfg = DeploymentConfig.from_dict(data)
    reqs = make_requests(600, rate_rps=r.choice([20, 80]), seed=n, input_range=(1, 600),
                         output_range=(20, 300), groups=8)  # fmt: skip
    blocks = {name: r.choice([150, 400]) * 16 // engine["block_size"] for name, _ in cfg.pools()}
    made: list[Checked] = []

    def checked(config: DeploymentConfig, rng: np.random.Generator, name: RouterName) -> Router:
        made.append(Checked(config, rng, name))
        return made[-1]

    calls = {"bounds": 0, "synced": 0}
    bounds, scan = EngineWorker.kv_load_range, LeastLoadedScan.route

    def counted_bounds(w: EngineWorker, now: int) -> tuple[float, float]:
        calls["bounds"] += w.lags(now)
        return bounds(w, now)

    def counted_scan(self: LeastLoadedScan, *args: Any) -> int:
        calls["synced"] += 1
        return scan(self, *args)

    monkeypatch.setattr(EngineWorker, "kv_load_range", counted_bounds)
    monkeypatch.setattr(LeastLoadedScan, "route", counted_scan)
    fast = _run(cfg, reqs, blocks)
    assert calls["bounds"] > 20  # lagging tied workers, read without a sync ...
    assert calls["synced"] < calls["bounds"] / 4  # ... seldom synced after all
    with monkeypatch.context() as m:
        m.setattr(build, "make_router", checked)
        assert _run(cfg, reqs, blocks).records.equal(fast.records)
    assert sum(c.checked for c in made) > 25
    monkeypatch.setattr(build, "make_router", _scan)
    assert _run(cfg, reqs, blocks).records.equal(fast.records)
