"""Fast-forward equals stepping on random engine configurations, including unusual ones.

Seeded random cases (reproducible: case N is ``random.Random(N)``): tiny KV pools (preemption),
token budgets as small as ``max_num_seqs``, block sizes 16-512, chunked prefill and prefix
caching on and off, 1-3 workers, every router, bursts at one instant, closed loops and think
times. Every case must give identical per-request records and per-worker busy time in both
modes and leave no KV block held and no request behind. Cases 72, 174 and 221 once caught a
prefix eviction that made a waiting request admissible in the middle of a fast-forwarded
segment.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from dynosim import DeploymentConfig, Request, Simulation
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.simulation import SimResult
from tests.conftest import make_requests


def _run(
    cfg: DeploymentConfig, reqs: list[Request], kv_blocks: int, ff: bool
) -> tuple[SimResult, list[int]]:
    """The result and each worker's ``busy_us``."""
    perf = DeploymentPerf(LinearStepTime(), kv_blocks, gpu_hour_usd=1.0)
    sim = Simulation(cfg, reqs, fast_forward=ff, perf=perf)
    res = sim.run()
    for w in sim.workers:
        w.kv.check()
        assert w.kv.used == 0
        assert not w.running
        assert not w.waiting
        assert 0 <= w.busy_us <= sim.env.now
    return res, [w.busy_us for w in sim.workers]


def _case(n: int, *, chunked: bool | None = None) -> tuple[DeploymentConfig, list[Request], int]:
    r = random.Random(n)
    bs = r.choice([16, 32, 64, 128, 256, 512])
    seqs = r.choice([1, 2, 4, 16, 64])
    budget = max(seqs, r.choice([seqs, seqs * 2, 512, 2048, 8192]))
    engine = {
        "max_num_seqs": seqs,
        "max_num_batched_tokens": budget,
        "block_size": bs,
        "enable_prefix_caching": r.random() < 0.7,
        "enable_chunked_prefill": r.random() < 0.7 if chunked is None else chunked,
    }
    cfg = DeploymentConfig.from_dict(
        {
            "model": "x",
            "gpu": "h200_sxm",
            "workers": r.choice([1, 2, 3]),
            "router": r.choice(["round_robin", "random", "least_loaded", "kv_aware"]),
            "engine": engine,
        }
    )
    reqs = make_requests(
        r.choice([20, 60, 150]),
        rate_rps=r.choice([5, 50, 1000]),
        seed=n,
        # with chunked prefill off, prompts that fit the budget (longer ones are rejected)
        input_range=(1, r.choice([50, 600, 3000]) if chunked is None else max(2, budget)),
        output_range=(1, r.choice([2, 20, 300])),
        closed_loop=r.choice([None, None, 4]),
    )
    if r.random() < 0.3:  # bursts at one instant, think times between turns
        reqs = [
            replace(q, arrival_s=round(q.arrival_s, 1), delay_s=r.choice([0, 0.01, 0.5]))
            for q in reqs
        ]
    kv = r.choice([5, 20, 60, 300, 5000]) * (16 if bs == 16 else 1)
    return cfg, reqs, max(1, kv * 16 // bs)


def _check(cfg: DeploymentConfig, reqs: list[Request], kv_blocks: int) -> None:
    fast, fast_busy = _run(cfg, reqs, kv_blocks, ff=True)
    slow, slow_busy = _run(cfg, reqs, kv_blocks, ff=False)
    assert fast.records.equal(slow.records)
    assert fast_busy == slow_busy
    assert fast.metrics.completed_requests + fast.metrics.rejected_requests == len(reqs)


@pytest.mark.parametrize("start", range(0, 240, 40))
def test_fast_forward_equals_stepping(start: int) -> None:
    for n in range(start, start + 40):
        _check(*_case(n))


def test_preempted_requests_recompute_with_chunked_prefill_off() -> None:
    # A preempted request recomputes prompt + generated tokens, which may exceed the budget:
    # it must then be chunked, or it would wait forever.
    for n in range(60):
        _check(*_case(n, chunked=False))


@pytest.mark.parametrize("ff", [True, False])
def test_busy_time_is_the_sum_of_step_durations(ff: bool) -> None:
    # One request on an idle worker: every step from its arrival to its completion is busy.
    # Two requests far apart: the idle gap between them is not.
    cfg = DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "workers": 1})
    reqs = [
        Request(id=0, arrival_s=0.5, input_tokens=700, output_tokens=40),
        Request(id=1, arrival_s=100.0, input_tokens=300, output_tokens=9),
    ]
    res, busy = _run(cfg, reqs, 5000, ff)
    rec = res.records
    assert busy == [int((rec.finish_us - rec.arrival_us).sum())]
