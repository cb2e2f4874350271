"""The planner: worker pools that grow under load, drain after it, and what that costs.

Workloads are built from explicit arrival times (evenly spaced within each phase of a
piecewise-constant rate, offset so that no arrival falls on a planner tick), served with the
exact linear step-time model so that the SLA policy's capacities can be worked out by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

from dynosim import ConfigError, DeploymentConfig, Request, Simulation
from dynosim.cluster.pool import WorkerPool
from dynosim.engine.worker import EngineWorker
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.simulation import SimResult
from tests.conftest import assert_workers_empty, make_requests

ENGINE = {"max_num_seqs": 16, "max_num_batched_tokens": 2048, "block_size": 16}
PERF = DeploymentPerf(LinearStepTime(), 20_000, gpu_hour_usd=2.0, kv_bytes_per_token=2048)
PLANNER: dict[str, Any] = {
    "policy": "load",
    "adjustment_interval_s": 2.0,
    "metric_pulling_interval_s": 0.5,
    "startup_s": 1.0,
    "min_workers": 1,
    "max_workers": 4,
}
BURST = [(10.0, 4.0), (10.0, 60.0), (30.0, 1.0)]  # (seconds, requests per second)


def phases(
    spec: list[tuple[float, float]], *, isl: int = 1000, osl: int = 100, offset: float = 0.0123
) -> list[Request]:
    """Evenly spaced arrivals at a piecewise-constant rate."""
    out: list[Request] = []
    start = 0.0
    for duration, rate in spec:
        for k in range(round(duration * rate)):
            t = offset + start + k / rate
            out.append(Request(id=len(out), arrival_s=t, input_tokens=isl, output_tokens=osl))
        start += duration
    return out


def agg_config(planner: Mapping[str, Any] | None = None, **overrides: Any) -> DeploymentConfig:
    data: dict[str, Any] = {"model": "test/model", "gpu": "h200_sxm", "workers": 1}
    data["engine"] = ENGINE
    if planner is not None:
        data["planner"] = {**PLANNER, **planner}
    data.update(overrides)
    return DeploymentConfig.from_dict(data)


def disagg_config(planner: Mapping[str, Any] | None = None, **overrides: Any) -> DeploymentConfig:
    data: dict[str, Any] = {
        "model": "test/model",
        "gpu": "h200_sxm",
        "mode": "disagg",
        "engine": ENGINE,
        "prefill": {"tp": 1, "workers": 1},
        "decode": {"tp": 1, "workers": 1},
        "kv_transfer": {"gbps": 50.0, "latency_us": 30.0},
    }
    if planner is not None:
        data["planner"] = {**PLANNER, **planner}
    data.update(overrides)
    return DeploymentConfig.from_dict(data)


AddLog = list[tuple[str, int, int]]


def run(
    cfg: DeploymentConfig,
    reqs: list[Request],
    *,
    ff: bool = True,
    warmup: int = 0,
    perf: DeploymentPerf = PERF,
    **kwargs: Any,
) -> tuple[SimResult, Simulation, AddLog]:
    """Run to the end; also log every worker the planner adds as (pool, index, time_us)."""
    sim = Simulation(cfg, reqs, fast_forward=ff, perf=perf, **kwargs)
    added: AddLog = []
    for name, pool in sim.pools.items():
        pool.add = _spy(name, pool, added)  # type: ignore[method-assign,assignment]
    res = sim.run(warmup_requests=warmup)
    assert_workers_empty(sim)
    assert res.metrics.completed_requests + res.metrics.rejected_requests == len(reqs)
    return res, sim, added


def _spy(name: str, pool: WorkerPool, log: AddLog) -> Callable[[int, int], EngineWorker]:
    add = pool.add

    def spy(now_us: int, startup_us: int) -> EngineWorker:
        w = add(now_us, startup_us)
        log.append((name, w.index, now_us))
        return w

    return spy


def step_gpus(pools: Mapping[Any, WorkerPool]) -> tuple[list[int], list[int]]:
    """The deployment's provisioned GPUs as a step function: change times and values."""
    times = sorted({t for p in pools.values() for t, _ in p.gpu_changes})
    values = []
    for t in times:
        total = 0
        for p in pools.values():
            total += [g for s, g in p.gpu_changes if s <= t][-1]
        values.append(total)
    return times, values


def integral(times: list[int], values: list[int], t0: float, t1: float) -> float:
    """GPU-microseconds of a step function over [t0, t1]."""
    total = 0.0
    for i, (t, v) in enumerate(zip(times, values, strict=True)):
        end = times[i + 1] if i + 1 < len(times) else math.inf
        lo, hi = max(t, t0), min(end, t1)
        if hi > lo:
            total += v * (hi - lo)
    return total


def timeline(res: SimResult, pool: str) -> dict[str, list[Any]]:
    assert res.metrics.timeline is not None
    tl = res.metrics.timeline[pool]
    assert isinstance(tl, dict)
    return tl


def at(tl: dict[str, list[Any]], column: str, t_s: float) -> Any:
    """The sample of ``column`` taken at ``t_s`` (before that tick's decision)."""
    i = min(range(len(tl["t_s"])), key=lambda j: abs(tl["t_s"][j] - t_s))
    assert tl["t_s"][i] == pytest.approx(t_s)
    return tl[column][i]


# -------------------------------------------------------------------- burst and bounds
@pytest.mark.parametrize(("max_workers", "max_gpus"), [(3, None), (8, 3)])
def test_scales_up_under_a_burst_and_back_down_after_it(
    max_workers: int, max_gpus: int | None
) -> None:
    cfg = agg_config({"max_workers": max_workers, "max_gpus": max_gpus})
    res, sim, added = run(cfg, phases(BURST))
    tl = timeline(res, "agg")
    prov, active = tl["provisioned_workers"], tl["active_workers"]
    assert res.metrics.scaling_events > 0
    assert res.metrics.scaling_events == sim.pools["agg"].scaling_events
    assert max(at(tl, "provisioned_workers", t) for t in np.arange(0.0, 10.0, 0.5)) == 1
    assert max(prov) == 3  # the cap, reached during the burst
    assert all(1 <= p <= 3 for p in prov)
    assert all(1 <= a <= p for a, p in zip(active, prov, strict=True))
    peak = int(np.argmax(prov))
    assert 10.0 < tl["t_s"][peak] < 25.0
    assert prov[-1] == 1
    assert active[-1] == 1
    assert any(p > a for a, p in zip(active, prov, strict=True))  # a cold start was seen
    assert max(g for _, g in sim.pools["agg"].gpu_changes) == 3
    assert min(g for _, g in sim.pools["agg"].gpu_changes[1:]) >= 1
    assert len(added) == 2
    assert {i for _, i, _ in added} == {1, 2}
    assert res.records.worker.max() == 2  # the added workers served requests
    pm = res.metrics.pools[0]
    assert pm.peak_workers == 3
    assert pm.scaling_events == res.metrics.scaling_events
    assert 1.0 < pm.workers < 3.0


def test_planner_keeps_the_deployment_within_max_gpus_and_per_pool_limits() -> None:
    planner = {
        "max_gpus": 10,
        "prefill": {"min_workers": 1, "max_workers": 2},
        "decode": {"min_workers": 2, "max_workers": 4},
    }
    cfg = disagg_config(planner, prefill={"tp": 2, "workers": 1}, decode={"tp": 2, "workers": 2})
    reqs = phases([(10.0, 4.0), (15.0, 120.0), (30.0, 1.0)], isl=5000, osl=150)
    res, sim, added = run(cfg, reqs)
    pre, dec = timeline(res, "prefill"), timeline(res, "decode")
    assert pre["t_s"] == dec["t_s"]
    assert all(1 <= p <= 2 for p in pre["provisioned_workers"])
    assert all(2 <= p <= 4 for p in dec["provisioned_workers"])
    assert all(a >= 1 for a in pre["active_workers"])
    assert all(a >= 2 for a in dec["active_workers"])
    total = [
        2 * p + 2 * d
        for p, d in zip(pre["provisioned_workers"], dec["provisioned_workers"], strict=True)
    ]
    assert max(total) == 10  # the cap was hit, and never passed
    times, values = step_gpus(sim.pools)
    assert max(values) == 10
    # each sample agrees with the GPU timeline (a decision tick samples before it decides)
    decisions = 0
    for i, t_s in enumerate(pre["t_s"]):
        t = round(t_s * 1e6)
        decides = t > 0 and t % 2_000_000 == 0
        decisions += decides
        before = [
            v for s, v in zip(times, values, strict=True) if s < t or (s == t and not decides)
        ]
        assert total[i] == before[-1]
    assert decisions > 10
    assert max(pre["provisioned_workers"]) == 2
    assert {name for name, _, _ in added} == {"prefill", "decode"}
    assert res.metrics.scaling_events > 0
    assert pre["provisioned_workers"][-1] == 1
    assert dec["provisioned_workers"][-1] == 2


# ------------------------------------------------------------- a fixed-size planner
def _without_planner_fields(res: SimResult) -> dict[str, Any]:
    d = res.metrics.deterministic_dict()
    del d["timeline"]
    for pool in d["pools"]:
        del pool["kv_usage"]  # sampled by the planner, NaN without one
    return d


@pytest.mark.parametrize("policy", ["load", "sla"])
def test_min_equal_to_max_workers_is_no_planner_agg(policy: str) -> None:
    reqs = make_requests(400, rate_rps=40.0, seed=2, input_range=(100, 3000))
    fixed = agg_config(None, workers=3, router="kv_aware")
    planned = agg_config(
        {"policy": policy, "min_workers": 3, "max_workers": 3, "adjustment_interval_s": 0.5,
         "metric_pulling_interval_s": 0.1},
        workers=3,
        router="kv_aware",
    )  # fmt: skip
    a, _, _ = run(fixed, reqs, perf=DeploymentPerf(LinearStepTime(), 1000, gpu_hour_usd=2.0))
    b, _, added = run(planned, reqs, perf=DeploymentPerf(LinearStepTime(), 1000, gpu_hour_usd=2.0))
    assert a.metrics.preemptions > 0  # a scarce KV pool, so sampling KV mid-segment matters
    assert not added
    assert a.records.equal(b.records)
    assert _without_planner_fields(a) == _without_planner_fields(b)
    assert b.metrics.scaling_events == 0
    assert set(timeline(b, "agg")["provisioned_workers"]) == {3}


@pytest.mark.parametrize("policy", ["load", "sla"])
def test_min_equal_to_max_workers_is_no_planner_disagg(policy: str) -> None:
    reqs = make_requests(300, rate_rps=40.0, seed=3, input_range=(100, 3000))
    pools = {"prefill": {"tp": 1, "workers": 2}, "decode": {"tp": 2, "workers": 3}}
    fixed = disagg_config(None, max_local_prefill_tokens=400, decode_router="kv_load", **pools)
    planned = disagg_config(
        {"policy": policy, "prefill": {"min_workers": 2, "max_workers": 2},
         "decode": {"min_workers": 3, "max_workers": 3}, "adjustment_interval_s": 0.5,
         "metric_pulling_interval_s": 0.1},
        max_local_prefill_tokens=400,
        decode_router="kv_load",
        **pools,
    )  # fmt: skip
    a, _, _ = run(fixed, reqs)
    b, _, added = run(planned, reqs)
    assert not added
    assert a.records.equal(b.records)
    assert a.kv_bytes_sent == b.kv_bytes_sent > 0
    assert _without_planner_fields(a) == _without_planner_fields(b)


@pytest.mark.parametrize("disagg", [False, True])
def test_sampling_the_pools_for_a_timeline_changes_nothing(disagg: bool) -> None:
    reqs = make_requests(300, rate_rps=40.0, seed=5, input_range=(100, 3000))
    cfg = (
        disagg_config(None, decode={"workers": 2}, max_local_prefill_tokens=300)
        if disagg
        else agg_config(None, workers=2)
    )
    perf = DeploymentPerf(LinearStepTime(), 900, gpu_hour_usd=2.0, kv_bytes_per_token=64)
    a, _, _ = run(cfg, reqs, perf=perf)
    b, _, _ = run(cfg, reqs, perf=perf, sample_interval_s=0.0137)
    assert a.records.equal(b.records)
    assert a.metrics.timeline is None
    assert b.metrics.timeline is not None
    assert len(timeline(b, "decode" if disagg else "agg")["t_s"]) > 100


@pytest.mark.parametrize("sample_interval_s", [0.5, 0.7])
def test_a_finer_timeline_does_not_change_the_planner_decisions(sample_interval_s: float) -> None:
    # the planner samples every 1 s and decides every 4 s, whatever the timeline's interval
    cfg = agg_config({"metric_pulling_interval_s": 1.0, "adjustment_interval_s": 4.0})
    reqs = make_requests(400, rate_rps=30.0, seed=23, input_range=(100, 3000),
                         output_range=(20, 300))  # fmt: skip
    a, _, added_a = run(cfg, reqs)
    b, _, added_b = run(cfg, reqs, sample_interval_s=sample_interval_s)
    assert added_a == added_b
    assert a.records.equal(b.records)


# ------------------------------------------------------------------------- cold start
@pytest.mark.parametrize("disagg", [False, True])
def test_an_added_worker_takes_traffic_only_after_its_cold_start(disagg: bool) -> None:
    startup_s = 1.5
    planner = {"startup_s": startup_s, "max_workers": 3}
    cfg = disagg_config(planner) if disagg else agg_config(planner)
    res, sim, added = run(cfg, phases(BURST))
    pool = "decode" if disagg else "agg"
    mine = [(i, t) for name, i, t in added if name == pool]
    assert mine
    rec = res.records
    startup_us = round(startup_s * 1e6)
    changes = dict(sim.pools[pool].gpu_changes)  # type: ignore[index]
    served = 0
    for index, t_add in mine:
        assert t_add in changes  # the decision is on the pool's GPU timeline
        on_it = rec.completed & (rec.worker == index)
        served += int(on_it.sum())
        assert np.all(rec.first_token_us[on_it] >= t_add + startup_us)
        if not disagg:  # routed at arrival, so it arrived after the worker became ready
            assert np.all(rec.arrival_us[on_it] >= t_add + startup_us)
        for rid in np.flatnonzero(on_it):  # joined the worker's queue after it was ready
            leg = sim.rec.state[rid]
            assert leg is not None
            assert leg.enqueued_us >= t_add + startup_us
    assert served > 0
    tl = timeline(res, pool)
    for _, t_add in mine:  # starting: provisioned, not active, over the whole cold start
        for t in np.arange(t_add / 1e6 + 0.5, (t_add + startup_us) / 1e6, 0.5):
            i = tl["t_s"].index(pytest.approx(t))
            assert tl["provisioned_workers"][i] > tl["active_workers"][i]


@pytest.mark.parametrize("disagg", [False, True])
def test_a_drained_worker_finishes_what_it_holds_then_frees_its_gpus(disagg: bool) -> None:
    cfg = disagg_config({"max_workers": 3}) if disagg else agg_config({"max_workers": 3})
    sim = Simulation(cfg, phases(BURST), perf=PERF)
    drained: AddLog = []
    retired: AddLog = []
    for name, pool in sim.pools.items():
        pool.remove = _drain_spy(name, pool, drained)  # type: ignore[method-assign,assignment]
        pool.on_retire = lambda w, now, name=name: retired.append((name, w.index, now))
    res = sim.run()
    rec = res.records
    pool_name = "decode" if disagg else "agg"
    assert any(name == pool_name for name, _, _ in drained)
    assert sorted(n_i for *n_i, _ in drained) == sorted(n_i for *n_i, _ in retired)
    retire_at = {(n, i): t for n, i, t in retired}
    for which, index, t_drain in drained:
        t_retire = retire_at[which, index]
        if which == "prefill":
            rids = np.flatnonzero(rec.prefill_worker == index)
            legs = [sim.rec.prefill_state[r] for r in rids]
            done = [leg.first_token_us for leg in legs if leg is not None]  # prefill leg ends
            routed = [leg.enqueued_us for leg in legs if leg is not None]
        else:
            rids = np.flatnonzero(rec.worker == index)
            done = rec.finish_us[rids].tolist()
            assert rec.transfer_us is not None
            routed = [
                leg.enqueued_us - int(rec.transfer_us[r])
                for r in rids
                if (leg := sim.rec.state[r]) is not None
            ]
        assert all(t <= t_drain for t in routed)  # nothing new after the drain began
        assert t_retire == max([t_drain, *done])  # frees its GPUs as soon as it is empty
        pool = sim.pools[which]  # type: ignore[index]
        assert t_retire in dict(pool.gpu_changes)


def _drain_spy(name: str, pool: WorkerPool, log: AddLog) -> Callable[[int], EngineWorker | None]:
    remove = pool.remove

    def spy(now_us: int) -> EngineWorker | None:
        w = remove(now_us)
        if w is not None:
            log.append((name, w.index, now_us))
        return w

    return spy


# --------------------------------------------------------------------- GPU accounting
@pytest.mark.parametrize("disagg", [False, True])
def test_metrics_gpus_are_the_time_average_of_provisioned_gpus(disagg: bool) -> None:
    planner = {"max_workers": 4}
    cfg = (
        disagg_config(planner, prefill={"tp": 2, "workers": 1}, decode={"tp": 1, "workers": 1})
        if disagg
        else agg_config(planner, tp=2)
    )
    warmup = 20
    res, sim, _ = run(cfg, phases(BURST), warmup=warmup)
    m, rec = res.metrics, res.records
    times, values = step_gpus(sim.pools)
    assert len(times) > 3  # the planner did change them
    # the benchmark window: earliest arrival among the measured requests to the last finish
    done = np.flatnonzero(rec.completed)
    measured = np.sort(done[np.argsort(rec.finish_us[done], kind="stable")[warmup:]])
    w0, w1 = float(rec.arrival_us[measured].min()), float(rec.finish_us[measured].max())
    assert w0 > 0
    expected = integral(times, values, w0, w1) / (w1 - w0)
    assert m.gpus == pytest.approx(expected, rel=1e-12)
    assert not math.isclose(m.gpus, cfg.gpus)
    assert m.gpu_hours == pytest.approx(integral(times, values, 0, w1) / 3.6e9, rel=1e-12)
    assert m.output_token_throughput_per_gpu == pytest.approx(
        m.output_token_throughput / m.gpus, rel=1e-12
    )
    window_h = (w1 - w0) / 3.6e9
    out = int(rec.output_tokens[measured].sum())
    assert m.cost_per_million_output_tokens == pytest.approx(
        m.gpus * window_h * 2.0 / (out / 1e6), rel=1e-9
    )
    end = max(float(rec.finish_us.max()), float(rec.arrival_us.max()))
    for pm in m.pools:
        pool = sim.pools[pm.name]  # type: ignore[index]
        ts = [t for t, _ in pool.gpu_changes]
        gs = [g for _, g in pool.gpu_changes]
        assert pm.gpus == pytest.approx(integral(ts, gs, 0, end) / end, rel=1e-12)
        assert pm.workers == pytest.approx(pm.gpus / pool.tp, rel=1e-12)
        assert pm.peak_workers == max(gs) // pool.tp
    assert sum(pm.gpus for pm in m.pools) == pytest.approx(integral(times, values, 0, end) / end)


# ------------------------------------------------------------------------ SLA policy
def _sla_expectation(isl: int, osl: int, chunk: int, seqs: int, rate: float) -> tuple[int, int]:
    """Workers the SLA planner should want for a rate, worked out from the linear model.

    Prefill: prompt tokens per second of full ``chunk``-token steps. Decode: output tokens per
    second at the largest batch whose step meets the 50 ms ITL SLO; every batch does here, so
    it is ``max_num_seqs`` (the KV pool holds more contexts of ``isl + osl / 2`` tokens).
    """
    t = LinearStepTime()
    prefill_step = round(t.base_us + t.per_token_us * chunk + t.per_seq_us)
    prefill_tps = chunk / (prefill_step / 1e6)
    ctx = round(isl + osl / 2)
    n = min(seqs, 20_000 * 16 // ctx)
    decode_step = round(
        t.base_us + (t.per_token_us + t.per_seq_us) * n + t.per_kv_token_us * n * ctx
    )
    assert decode_step <= 50_000
    decode_tps = n / (decode_step / 1e6)
    return math.ceil(rate * isl / prefill_tps), math.ceil(rate * osl / decode_tps)


def test_sla_policy_follows_the_arrival_rate_in_both_pools() -> None:
    isl, osl, chunk = 2000, 300, 512
    engine = {**ENGINE, "max_num_seqs": 64, "max_num_batched_tokens": chunk}
    planner = {
        "policy": "sla",
        "adjustment_interval_s": 5.0,
        "metric_pulling_interval_s": 1.0,
        "startup_s": 2.0,
        "prefill": {"min_workers": 1, "max_workers": 8},
        "decode": {"min_workers": 1, "max_workers": 8},
    }
    cfg = disagg_config(planner, engine=engine)
    rates = (60.0, 120.0, 60.0)
    reqs = phases([(20.0, r) for r in rates], isl=isl, osl=osl)
    res, _sim, _ = run(cfg, reqs)
    want = [_sla_expectation(isl, osl, chunk, 64, r) for r in rates]
    assert want == [(2, 2), (3, 4), (2, 2)]  # the rate doubling asks more of both pools
    pre, dec = timeline(res, "prefill"), timeline(res, "decode")
    for phase, (p, d) in enumerate(want):
        t = 20.0 * phase + 19.0  # late in the phase, after the decision and the cold start
        assert at(pre, "active_workers", t) == p
        assert at(dec, "active_workers", t) == d
    assert at(pre, "active_workers", 0.0) == at(dec, "active_workers", 0.0) == 1
    # before the first decision of the doubled rate (at 25 s), the pools are still small
    assert at(dec, "provisioned_workers", 24.0) == 2
    assert res.metrics.scaling_events == sum(p.scaling_events for p in res.metrics.pools)


def test_sla_policy_is_held_to_the_pool_limits_and_max_gpus() -> None:
    isl, osl, chunk = 2000, 300, 512
    engine = {**ENGINE, "max_num_seqs": 64, "max_num_batched_tokens": chunk}
    planner = {
        "policy": "sla",
        "adjustment_interval_s": 5.0,
        "metric_pulling_interval_s": 1.0,
        "startup_s": 2.0,
        "max_gpus": 5,
        "prefill": {"min_workers": 1, "max_workers": 2},
        "decode": {"min_workers": 1, "max_workers": 8},
    }
    cfg = disagg_config(planner, engine=engine)
    reqs = phases([(20.0, 60.0), (20.0, 120.0)], isl=isl, osl=osl)
    res, sim, _ = run(cfg, reqs)
    pre, dec = timeline(res, "prefill"), timeline(res, "decode")
    # the doubled rate wants 3 prefill and 4 decode workers: prefill is held to 2 by its
    # limit, and decode to 5 - 2 = 3 by the GPU cap
    assert at(pre, "active_workers", 39.0) == 2
    assert at(dec, "active_workers", 39.0) == 3
    assert max(pre["provisioned_workers"]) == 2
    _, values = step_gpus(sim.pools)
    assert max(values) == 5


def test_load_policy_in_disagg_scales_the_pool_that_queues() -> None:
    # long prompts and short answers: the prefill pool is the bottleneck
    reqs = phases([(5.0, 2.0), (10.0, 80.0), (30.0, 1.0)], isl=6000, osl=4)
    cfg = disagg_config({"max_workers": 4, "startup_s": 0.5})
    res, _, added = run(cfg, reqs)
    pre, dec = timeline(res, "prefill"), timeline(res, "decode")
    assert max(pre["provisioned_workers"]) > 1
    assert max(dec["provisioned_workers"]) == 1
    assert {name for name, _, _ in added} == {"prefill"}
    assert pre["provisioned_workers"][-1] == 1


# ---------------------------------------------------------------- fast-forward parity
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("agg-load", {}, {}),
    ("agg-sla", {"policy": "sla", "adjustment_interval_s": 1.0}, {}),
    ("agg-load-nostart", {"startup_s": 0.0, "kv_scale_up": 0.05, "kv_scale_down": 0.01}, {}),
    ("disagg-load", {}, {"mode": "disagg"}),
    ("disagg-sla", {"policy": "sla", "adjustment_interval_s": 1.0}, {"mode": "disagg"}),
    (
        "disagg-local-gpus",
        {"max_gpus": 4, "queue_scale_up": 0.2, "queue_scale_down": 0.1},
        {"mode": "disagg", "max_local_prefill_tokens": 700, "decode_router": "kv_aware"},
    ),
]


@pytest.mark.parametrize(("name", "planner", "extra"), CASES, ids=[c[0] for c in CASES])
def test_fast_forward_equals_stepping_with_a_planner(
    name: str, planner: dict[str, Any], extra: dict[str, Any]
) -> None:
    extra = dict(extra)
    disagg = extra.pop("mode", "agg") == "disagg"
    cfg = disagg_config(planner, **extra) if disagg else agg_config(planner, **extra)
    reqs = make_requests(200, rate_rps=4.0, seed=9, input_range=(100, 3000))
    reqs += [  # then a burst
        Request(id=200 + i, arrival_s=60.0 + i / 80, input_tokens=1500 + 7 * i, output_tokens=120)
        for i in range(400)
    ]
    perf = DeploymentPerf(LinearStepTime(), 1200, gpu_hour_usd=2.0, kv_bytes_per_token=1024)
    fast, fsim, fadd = run(cfg, reqs, ff=True, perf=perf)
    slow, ssim, sadd = run(cfg, reqs, ff=False, perf=perf)
    assert fast.records.equal(slow.records)
    assert fadd == sadd
    assert fast.metrics.deterministic_dict() == slow.metrics.deterministic_dict()  # timeline too
    assert [w.busy_us for w in fsim.workers] == [w.busy_us for w in ssim.workers]
    assert {n: p.gpu_changes for n, p in fsim.pools.items()} == {
        n: p.gpu_changes for n, p in ssim.pools.items()
    }
    assert fast.metrics.scaling_events > 0
    assert fast.metrics.preemptions > 0  # the KV pool is scarce: preemption mid-plan
    assert fast.events < slow.events


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("planner", "extra", "field"),
    [
        ({"policy": "pid"}, {}, "planner.policy"),
        ({"adjustment_interval_s": 0}, {}, "planner.adjustment_interval_s"),
        ({"startup_s": -1}, {}, "planner.startup_s"),
        ({"min_workers": 3, "max_workers": 2}, {}, "planner.max_workers"),
        ({"min_workers": 2}, {}, "workers"),
        ({"max_gpus": 1}, {"mode": "disagg"}, "planner.max_gpus"),
        ({"decode": {"min_workers": 1, "max_workers": 2}}, {}, "planner.decode"),
        ({"prefill": {"min_workers": 1, "max_workers": 2}}, {}, "planner.prefill"),
        ({"decode": {"min_workers": 2, "max_workers": 4}}, {"mode": "disagg"}, "decode.workers"),
        ({"decode": {"max_workers": 0}}, {"mode": "disagg"}, "planner.decode.max_workers"),
        ({"decode": {"most": 3}}, {"mode": "disagg"}, "planner.decode.most"),
        ({"kv_scale_down": 0.95}, {}, "planner.kv_scale_down"),
        ({"cooldown_s": 5}, {}, "planner.cooldown_s"),
    ],
)
def test_bad_planner_field_is_named(
    planner: dict[str, Any], extra: dict[str, Any], field: str
) -> None:
    extra = dict(extra)
    disagg = extra.pop("mode", "agg") == "disagg"
    with pytest.raises(ConfigError) as exc:
        disagg_config(planner, **extra) if disagg else agg_config(planner, **extra)
    assert exc.value.field == field
    text = str(exc.value)
    assert "\n" not in text
    assert text.startswith(f"{field}: ")
