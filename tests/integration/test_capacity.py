"""Early stop and capacity search on real simulations with an exact linear step-time model."""

from __future__ import annotations

import numpy as np
import pytest

from dynosim import Request, Simulation
from dynosim.config import SLOConfig
from dynosim.metrics import Metrics
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.slo_monitor import LatencyBound, SLOMonitor
from search.run.capacity import Probe, find_capacity
from search.study.load import LoadAxis, LoadSpec
from tests.conftest import make_requests, tiny_config

STATS = ("avg", "max", "p50", "p90", "p99")
METRICS = ("time_to_first_token", "inter_token_latency", "request_latency")


def _holds(m: Metrics, monitor: SLOMonitor) -> bool:
    flat = m.flat()
    for b in monitor.bounds:
        value = flat[f"{b.metric}.{b.stat}"]
        if not value <= b.bound_ms:  # NaN (nothing measured) breaks the bound too
            return False
    return monitor.min_attainment is None or m.slo_attainment >= monitor.min_attainment


def _sim(cfg, reqs, *, kv_blocks=20_000, timing=None, speedup=1.0):  # type: ignore[no-untyped-def]
    perf = DeploymentPerf(timing or LinearStepTime(), kv_blocks, gpu_hour_usd=2.0)
    return Simulation(cfg, reqs, perf=perf, speedup=speedup)


def _random_monitor(rng: np.random.Generator, ttft_scale_ms: float) -> SLOMonitor:
    bounds = []
    for _ in range(int(rng.integers(1, 3))):
        metric = METRICS[int(rng.integers(len(METRICS)))]
        scale = {"time_to_first_token": ttft_scale_ms, "inter_token_latency": 8.0}.get(
            metric, ttft_scale_ms * 10
        )
        bound = float(scale * rng.uniform(0.3, 3.0))
        bounds.append(LatencyBound(metric=metric, stat=STATS[int(rng.integers(5))], bound_ms=bound))
    attainment = float(rng.uniform(0.5, 0.99)) if rng.random() < 0.4 else None
    return SLOMonitor(bounds=tuple(bounds), min_attainment=attainment)


@pytest.mark.parametrize("case", range(40))
def test_early_stop_gives_the_full_runs_verdict(case: int) -> None:
    rng = np.random.default_rng(1000 + case)
    reqs = make_requests(
        int(rng.integers(150, 400)),
        rate_rps=float(rng.uniform(5, 120)),
        seed=case,
        output_range=(1, int(rng.integers(20, 400))),
    )
    slo = SLOConfig(
        ttft_ms=float(rng.uniform(100, 3000)), itl_ms=float(rng.uniform(6, 20)), e2e_ms=None
    )
    cfg = tiny_config(
        workers=int(rng.integers(1, 4)),
        router=["round_robin", "least_loaded", "kv_aware"][case % 3],
        slo={"ttft_ms": slo.ttft_ms, "itl_ms": slo.itl_ms},
    )
    monitor = _random_monitor(rng, ttft_scale_ms=500.0)
    warmup = int(rng.integers(0, 30))
    kv = int(rng.choice([600, 20_000]))
    full = _sim(cfg, reqs, kv_blocks=kv).run(warmup_requests=warmup)
    watched = _sim(cfg, reqs, kv_blocks=kv).run(warmup_requests=warmup, stop=monitor)
    if watched.metrics.early_stop is None:
        assert watched.records.equal(full.records)
        assert watched.metrics.deterministic_dict() == full.metrics.deterministic_dict()
    else:
        assert not _holds(full.metrics, monitor), watched.metrics.early_stop
        assert watched.metrics.simulated_requests <= len(reqs)


def test_early_stop_stops_an_overloaded_run_early() -> None:
    reqs = make_requests(2000, rate_rps=400.0, seed=2)
    cfg = tiny_config(workers=1)
    monitor = SLOMonitor(
        bounds=(LatencyBound(metric="time_to_first_token", stat="p90", bound_ms=500),)
    )
    full = _sim(cfg, reqs).run()
    stopped = _sim(cfg, reqs).run(stop=monitor)
    assert full.metrics.time_to_first_token.p90 > 500
    assert stopped.metrics.early_stop == "SLO cannot be met: time_to_first_token.p90 <= 500"
    assert stopped.metrics.simulated_requests < len(reqs) / 2
    assert stopped.events < full.events / 2


def test_an_empty_monitor_changes_nothing() -> None:
    reqs = make_requests(300, rate_rps=30.0)
    cfg = tiny_config()
    plain = _sim(cfg, reqs).run()
    watched = _sim(cfg, reqs).run(stop=SLOMonitor())
    assert watched.metrics.deterministic_dict() == plain.metrics.deterministic_dict()


def test_speedup_equals_the_sped_up_workload() -> None:
    from dynosim.workload import speedup

    reqs = make_requests(400, rate_rps=10.0, closed_loop=None)
    cfg = tiny_config()
    a = _sim(cfg, reqs, speedup=2.5).run()
    b = _sim(cfg, speedup(reqs, 2.5)).run()
    assert a.records.equal(b.records)


# --------------------------------------------------------------------------- capacity
def _md1_requests(n: int) -> list[Request]:
    """Poisson arrivals at 1 req/s (the load level is the rate), fixed lengths."""
    rng = np.random.default_rng(11)
    arrivals = np.cumsum(rng.exponential(1.0, n))
    return [
        Request(id=i, arrival_s=float(t), input_tokens=100, output_tokens=10)
        for i, t in enumerate(arrivals)
    ]


def test_capacity_search_finds_the_md1_rate_meeting_a_mean_wait_bound() -> None:
    # One worker serving one request at a time: 1 prefill step + 9 decode steps of 1 ms, so
    # D = 10 ms and the queue is M/D/1. Mean TTFT = W + 1 ms (its prefill step) + 0.5 ms (the
    # mean residual of a step boundary), W = lambda D^2 / (2 (1 - lambda D)) (Pollaczek-
    # Khinchine). The highest rate with mean TTFT <= 20 ms solves W = 18.5 ms.
    timing = LinearStepTime(base_us=1000.0, per_token_us=0.0, per_kv_token_us=0.0, per_seq_us=0.0)
    cfg = tiny_config(workers=1, engine={"max_num_seqs": 1, "max_num_batched_tokens": 512})
    reqs = _md1_requests(20_000)
    d, w = 0.010, 0.0185
    expected = 2 * w / (d * d + 2 * w * d)  # ~78.7 req/s, rho ~0.79
    monitor = SLOMonitor(
        bounds=(LatencyBound(metric="time_to_first_token", stat="avg", bound_ms=20.0),)
    )

    def probe(level: float) -> Probe:
        res = _sim(cfg, reqs, timing=timing, speedup=level).run(stop=monitor)
        m = res.metrics
        ok = m.early_stop is None and m.time_to_first_token.avg <= 20.0
        return Probe(level, m.flat(), ok, m.simulated_requests, m.early_stop)

    spec = LoadSpec(mode="capacity", tolerance=0.02, start=40.0)
    found = find_capacity(probe, LoadAxis("speedup", 40.0), spec)
    assert found.level is not None
    assert found.level == pytest.approx(expected, rel=0.04)
    # Exactly on the grid, and the next grid level is infeasible.
    above = found.level * 1.02
    assert any(not p.feasible and p.level == pytest.approx(above) for p in found.probes)


def _capacity_of(workers: int, reqs: list[Request]) -> float:
    cfg = tiny_config(workers=workers, router="least_loaded")
    monitor = SLOMonitor(
        bounds=(LatencyBound(metric="time_to_first_token", stat="p90", bound_ms=1000.0),)
    )

    def probe(level: float) -> Probe:
        m = _sim(cfg, reqs, speedup=level).run(stop=monitor).metrics
        ok = m.early_stop is None and m.time_to_first_token.p90 <= 1000.0
        return Probe(level, m.flat(), ok, m.simulated_requests, m.early_stop)

    found = find_capacity(probe, LoadAxis("speedup", 1.0), LoadSpec(mode="capacity"))
    assert found.level is not None
    return found.level


def test_capacity_is_monotone_in_workers() -> None:
    reqs = make_requests(600, rate_rps=5.0, seed=4, input_range=(200, 2000))
    caps = [_capacity_of(w, reqs) for w in (1, 2, 4)]
    assert caps == sorted(caps)
    assert caps[-1] > 2 * caps[0]


def test_capacity_does_not_depend_on_the_hint() -> None:
    calls: list[float] = []

    def probe(level: float) -> Probe:  # a monotone system with capacity 3.3
        calls.append(level)
        return Probe(level, {}, level <= 3.3, 100, None if level <= 3.3 else "too much")

    axis, spec = LoadAxis("speedup", 1.0), LoadSpec(mode="capacity")
    results = set()
    for hint in (None, 0.2, 1.0, 3.2, 3.5, 9.0, 50.0):
        calls.clear()
        found = find_capacity(probe, axis, spec, hint=hint)
        results.add(found.level)
        assert len(calls) == len(set(calls))  # no level probed twice
    assert len(results) == 1
    (level,) = results
    assert level is not None
    assert 3.3 / 1.05 < level <= 3.3


def test_no_load_meets_the_slo() -> None:
    def probe(level: float) -> Probe:
        return Probe(level, {}, False, 10, "ITL too high")

    found = find_capacity(probe, LoadAxis("rate_rps", 8.0), LoadSpec(mode="capacity"))
    assert found.level is None
    assert found.reason is not None
    assert found.reason.startswith("no load meets the SLO")
    assert "lowest tried: 0.126 req/s" in found.reason
    assert "ITL too high" in found.reason


def test_capacity_at_the_limit() -> None:
    def probe(level: float) -> Probe:
        return Probe(level, {}, True, 10)

    found = find_capacity(probe, LoadAxis("concurrency", 4.0), LoadSpec(mode="capacity", max=40))
    assert found.at_limit
    assert found.level is not None
    assert 36 <= found.level <= 40


@pytest.mark.parametrize("case", range(12))
def test_monitor_and_speedup_agree_in_fast_forward_and_stepping(case: int) -> None:
    rng = np.random.default_rng(500 + case)
    reqs = make_requests(200, rate_rps=float(rng.uniform(10, 80)), seed=case)
    cfg = tiny_config(workers=int(rng.integers(1, 4)), router="kv_aware")
    monitor = _random_monitor(rng, ttft_scale_ms=500.0)
    kv = int(rng.choice([600, 20_000]))
    speedup = float(rng.uniform(0.5, 3.0))
    results = []
    for ff in (True, False):
        perf = DeploymentPerf(LinearStepTime(), kv, gpu_hour_usd=2.0)
        sim = Simulation(cfg, reqs, perf=perf, speedup=speedup, fast_forward=ff)
        results.append(sim.run(warmup_requests=10, stop=monitor))
    fast, slow = results
    assert fast.metrics.early_stop == slow.metrics.early_stop
    assert fast.metrics.simulated_requests == slow.metrics.simulated_requests
    if fast.metrics.early_stop is None:
        assert fast.records.equal(slow.records)
        assert fast.metrics.deterministic_dict() == slow.metrics.deterministic_dict()
