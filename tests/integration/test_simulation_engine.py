"""End-to-end behaviour of the simulator with an exact linear step-time model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dynosim import Request, Simulation
from dynosim.errors import ConfigError
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from tests.conftest import assert_workers_empty, make_requests, tiny_config

ROUTERS = ["round_robin", "random", "least_loaded", "kv_aware"]


def _run(config, requests, *, kv_blocks=20_000, ff=True, timing=None, seed=0):  # type: ignore[no-untyped-def]
    perf = DeploymentPerf(timing or LinearStepTime(), kv_blocks, gpu_hour_usd=2.0)
    sim = Simulation(config, requests, seed=seed, fast_forward=ff, perf=perf)
    result = sim.run()
    assert_workers_empty(sim)
    return result


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("kv_blocks", [20_000, 600])
def test_fast_forward_matches_stepping(router: str, kv_blocks: int) -> None:
    reqs = make_requests(600, rate_rps=25.0)
    cfg = tiny_config(router=router)
    fast = _run(cfg, reqs, kv_blocks=kv_blocks, ff=True)
    slow = _run(cfg, reqs, kv_blocks=kv_blocks, ff=False)
    assert fast.records.equal(slow.records)
    assert fast.metrics.deterministic_dict() == slow.metrics.deterministic_dict()
    assert fast.events < slow.events / 3  # the fast path really skips steps
    if kv_blocks == 600:
        assert fast.metrics.preemptions > 0  # the scarce case exercises preemption


def test_fast_forward_matches_stepping_closed_loop_without_chunking() -> None:
    reqs = make_requests(300, closed_loop=24, input_range=(100, 2000))
    cfg = tiny_config(
        router="kv_aware",
        engine={
            "max_num_seqs": 16,
            "max_num_batched_tokens": 2048,
            "block_size": 64,
            "enable_chunked_prefill": False,
        },
    )
    fast = _run(cfg, reqs, kv_blocks=400, ff=True)
    slow = _run(cfg, reqs, kv_blocks=400, ff=False)
    assert fast.records.equal(slow.records)


def test_every_request_completes_or_is_rejected_with_a_reason() -> None:
    reqs = make_requests(200)
    big = Request(id=200, arrival_s=1.0, input_tokens=50_000, output_tokens=10)
    follower = Request(id=201, arrival_s=0.0, input_tokens=100, output_tokens=5, after_id=200)
    res = _run(tiny_config(), [*reqs, big, follower], kv_blocks=1000)
    assert res.metrics.completed_requests == 201
    assert res.metrics.rejected_requests == 1
    assert "KV tokens" in res.rejections[200]
    # the follower of a rejected request is still sent, right after the rejection
    assert res.records.arrival_us[201] == res.records.arrival_us[200]


def test_tokens_and_times_are_consistent() -> None:
    reqs = make_requests(300)
    rec = _run(tiny_config(), reqs).records
    assert np.all(rec.first_token_us >= rec.arrival_us)
    assert np.all(rec.finish_us >= rec.first_token_us)
    one = rec.output_tokens == 1
    assert np.array_equal(rec.finish_us[one], rec.first_token_us[one])
    assert np.all(rec.finish_us[~one] > rec.first_token_us[~one])


def test_session_turn_waits_for_previous_turn_plus_delay() -> None:
    first = Request(id=0, arrival_s=0.0, input_tokens=600, output_tokens=50, block_hashes=(1, 2))
    second = Request(
        id=1,
        arrival_s=0.0,
        input_tokens=1200,
        output_tokens=20,
        block_hashes=(1, 2, 3),
        after_id=0,
        delay_s=2.5,
    )
    res = _run(tiny_config(workers=1), [first, second])
    rec = res.records
    assert rec.arrival_us[1] == rec.finish_us[0] + 2_500_000
    assert rec.cached_tokens[1] == 512  # first unit was computed fully by turn 1


def test_after_warmup_waits_for_the_warmups_and_refuses_a_follower() -> None:
    # two warm-ups of unequal length; the measured request is sent 0.5 s after the later one
    warm = [Request(id=i, arrival_s=0.0, input_tokens=100, output_tokens=n)
            for i, n in enumerate((5, 40))]  # fmt: skip
    measured = Request(id=2, arrival_s=0.0, input_tokens=100, output_tokens=5, delay_s=0.5,
                       after_warmup=True)  # fmt: skip
    perf = DeploymentPerf(LinearStepTime(), 20_000, gpu_hour_usd=2.0)
    sim = Simulation(tiny_config(workers=1), [*warm, measured], perf=perf)
    rec = sim.run(warmup_requests=2).records
    assert rec.arrival_us[2] == rec.finish_us[1] + 500_000 > rec.finish_us[0] + 500_000
    # without warm-ups the phase has drained at the start: it is sent 0.5 s after it
    rec = Simulation(tiny_config(workers=1), [*warm, measured], perf=perf).run().records
    assert rec.arrival_us[2] == 500_000
    bad = Request(id=2, arrival_s=0.0, input_tokens=1, output_tokens=1, after_id=0,
                  after_warmup=True)  # fmt: skip
    with pytest.raises(ConfigError, match=r"requests\[2\]\.after_warmup"):
        Simulation(tiny_config(workers=1), [*warm, bad], perf=perf)


def test_md1_queue_matches_pollaczek_khinchine() -> None:
    # One worker serving one request at a time, each with a fixed service time D: M/D/1.
    timing = LinearStepTime(base_us=1000.0, per_token_us=0.0, per_kv_token_us=0.0, per_seq_us=0.0)
    n_out = 10  # 1 prefill step + 9 decode steps of 1 ms: D = 10 ms
    service_s = 0.010
    rho = 0.7
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(service_s / rho, 20_000))
    reqs = [
        Request(id=i, arrival_s=float(t), input_tokens=100, output_tokens=n_out)
        for i, t in enumerate(arrivals)
    ]
    cfg = tiny_config(workers=1, engine={"max_num_seqs": 1, "max_num_batched_tokens": 512})
    rec = _run(cfg, reqs, timing=timing).records
    sojourn_s = (rec.finish_us - rec.arrival_us) / 1e6
    # Requests join at the next 1 ms step boundary: add the mean residual of a boundary (0.5 ms).
    expected = service_s + rho * service_s / (2 * (1 - rho)) + 0.0005
    assert sojourn_s.mean() == pytest.approx(expected, rel=0.05)


def test_littles_law_with_poisson_arrivals_seeing_time_averages() -> None:
    reqs = make_requests(4000, rate_rps=30.0, seed=5)
    sim = Simulation(
        tiny_config(router="least_loaded"),
        reqs,
        perf=DeploymentPerf(LinearStepTime(), 20_000, gpu_hour_usd=2.0),
    )
    seen: list[int] = []
    route = sim.entry.router.route

    def spy(rr, workers, now):  # type: ignore[no-untyped-def]
        seen.append(sum(w.outstanding for w in workers))
        return route(rr, workers, now)

    sim.entry.router.route = spy  # type: ignore[method-assign]
    rec = sim.run().records
    latency_s = (rec.finish_us - rec.arrival_us) / 1e6
    span_s = (rec.arrival_us.max() - rec.arrival_us.min()) / 1e6
    lam = len(reqs) / span_s
    assert np.mean(seen) == pytest.approx(lam * latency_s.mean(), rel=0.08)


def test_more_workers_never_lower_saturated_throughput() -> None:
    reqs = make_requests(800, closed_loop=256, input_range=(500, 1500), output_range=(50, 200))
    previous = 0.0
    for workers in (1, 2, 4, 8):
        m = _run(tiny_config(workers=workers), reqs).metrics
        assert m.output_token_throughput >= previous
        previous = m.output_token_throughput
    assert previous > 0


def test_kv_aware_routing_beats_round_robin_on_shared_prefixes() -> None:
    reqs = make_requests(
        1500, rate_rps=12.0, groups=40, shared_units=6, input_range=(3100, 5000), seed=2
    )
    cfg = {
        "workers": 4,
        "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "block_size": 16},
    }
    timing = LinearStepTime(per_pair_us=0.0005)
    rr = _run(tiny_config(router="round_robin", **cfg), reqs, kv_blocks=3000, timing=timing)
    kv = _run(tiny_config(router="kv_aware", **cfg), reqs, kv_blocks=3000, timing=timing)
    assert kv.metrics.prefix_cache_hit_rate > rr.metrics.prefix_cache_hit_rate + 0.05
    assert kv.metrics.time_to_first_token.p50 < rr.metrics.time_to_first_token.p50


def test_same_seed_same_metrics_random_router() -> None:
    reqs = make_requests(300)
    a = _run(tiny_config(router="random"), reqs, seed=7).metrics.deterministic_dict()
    b = _run(tiny_config(router="random"), reqs, seed=7).metrics.deterministic_dict()
    c = _run(tiny_config(router="random"), reqs, seed=8).metrics.deterministic_dict()
    assert a == b
    assert a != c
    assert not math.isnan(a["time_to_first_token"]["p99"])


def test_kv_aware_with_zero_overlap_weight_balances_a_burst() -> None:
    # 64 requests arrive together with no prefix in common: with the overlap term off the cost
    # is the worker's load alone, and requests routed but still queued count towards it.
    reqs = [
        Request(
            id=i,
            arrival_s=0.0,
            input_tokens=2048,
            output_tokens=50,
            block_hashes=tuple(range(4 * i, 4 * i + 4)),
        )
        for i in range(64)
    ]
    cfg = tiny_config(router="kv_aware", kv_router={"overlap_weight": 0.0})
    rec = _run(cfg, reqs).records
    counts = np.bincount(rec.worker, minlength=4)
    assert counts.max() - counts.min() <= 1
