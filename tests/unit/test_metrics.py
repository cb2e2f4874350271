"""``summarize``: what each metric means, on hand-made records."""

from __future__ import annotations

import numpy as np
import pytest

from dynosim.config import SLOConfig
from dynosim.metrics import RequestRecords, RunFacts, percentiles, summarize


def _records(arrival_ms, first_ms, finish_ms, osl):  # type: ignore[no-untyped-def]
    n = len(arrival_ms)
    us = lambda xs: np.array(xs, dtype=np.int64) * 1000  # noqa: E731
    return RequestRecords(
        arrival_us=us(arrival_ms),
        first_token_us=us(first_ms),
        finish_us=us(finish_ms),
        input_tokens=np.full(n, 100, dtype=np.int64),
        output_tokens=np.array(osl, dtype=np.int64),
        cached_tokens=np.zeros(n, dtype=np.int64),
        worker=np.zeros(n, dtype=np.int64),
        preemptions=np.zeros(n, dtype=np.int64),
    )


def _summarize(rec: RequestRecords, **kw):  # type: ignore[no-untyped-def]
    args = {"slo": SLOConfig(ttft_ms=100, itl_ms=20), "warmup_requests": 0, "wall_s": 1.0}
    args.update(kw)
    return summarize(rec, RunFacts(gpus=2, gpu_hour_usd=3.6), **args)


def test_latencies_itl_and_goodput() -> None:
    rec = _records([0, 0, 1000], [50, 200, 1050], [1050, 1200, 1050], [11, 11, 1])
    m = _summarize(rec)
    assert m.time_to_first_token.avg == pytest.approx((50 + 200 + 50) / 3)
    # ITL = (latency - TTFT) / (OSL - 1); a 1-token request has none
    assert m.inter_token_latency.avg == pytest.approx(100.0)
    assert m.output_token_throughput_per_user.avg == pytest.approx(10.0)
    # ITL SLO 20 ms: only the 1-token request (no ITL, TTFT 50 ms) is good; 1 in 1.2 s
    assert m.goodput == pytest.approx(1 / 1.2)
    # ITL SLO 150 ms: request 1 still misses TTFT (200 ms); 2 good in 1.2 s
    assert _summarize(rec, slo=SLOConfig(ttft_ms=100, itl_ms=150)).goodput == pytest.approx(2 / 1.2)
    assert m.completed_requests == 3


def test_warmup_requests_are_left_out_and_cost_matches_throughput() -> None:
    rec = _records([0, 10, 3_600_000], [5, 15, 3_600_010], [100, 110, 3_601_000], [1000] * 3)
    m = _summarize(rec, warmup_requests=2)
    assert m.completed_requests == 3  # counts are of the whole run
    assert m.output_token_throughput == pytest.approx(1000.0)  # 1000 tokens in the last 1 s
    per_million = 2 * 3.6 / 3600 / m.output_token_throughput * 1e6  # GPU-seconds per token
    assert m.cost_per_million_output_tokens == pytest.approx(per_million)
    assert m.gpu_hours == pytest.approx(2 * 3601.0 / 3600)  # provisioned from time 0


def test_rejected_requests_are_counted_not_measured() -> None:
    rec = _records([0, 0], [50, -1], [100, -1], [5, 5])  # -1: never served
    m = _summarize(rec)
    assert m.rejected_requests == 1
    assert m.completed_requests == 1
    assert m.time_to_first_token.max == pytest.approx(50.0)


@pytest.mark.parametrize("seed", range(6))
def test_percentiles_equal_numpy_bit_for_bit(seed: int) -> None:
    """``percentiles`` is numpy's linear method without its import of ``numpy.ma``: the same
    doubles on floats, integers, ties, single values and NaN."""
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n = int(rng.integers(1, 400))
        for v in (rng.random(n) * 1e4, rng.integers(0, 10**9, n), rng.integers(0, 4, n) * 1.0,
                  np.round(rng.lognormal(3.0, 2.0, n), 3)):  # fmt: skip
            assert np.array_equal(percentiles(v), np.percentile(v, [50.0, 90.0, 99.0]))
    with_nan = np.array([3.0, np.nan, 1.0])
    assert np.isnan(percentiles(with_nan)).all()
    assert np.isnan(np.percentile(with_nan, [50.0, 90.0, 99.0])).all()
