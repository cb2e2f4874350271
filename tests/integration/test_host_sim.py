"""Host processes in a simulation: no-op at zero cost, pure delays when unbounded, a knee when
saturated, and fast-forward still equal to stepping."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from dynosim import DeploymentConfig, Request, Simulation
from dynosim.config import HostConfig
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.simulation import SimResult
from tests.conftest import make_requests
from tests.integration.test_fast_forward_fuzz import _case, _cluster_case, _run


def _sim(
    cfg: DeploymentConfig,
    reqs: list[Request],
    *,
    ff: bool = True,
    speedup: float = 1.0,
    kv_blocks: int = 20_000,
) -> SimResult:
    perf: dict[str, DeploymentPerf] = {
        name: DeploymentPerf(LinearStepTime(), kv_blocks, gpu_hour_usd=1.0,
                             kv_bytes_per_token=4096)
        for name, _ in cfg.pools()
    }  # fmt: skip
    return Simulation(cfg, reqs, fast_forward=ff, perf=perf, speedup=speedup).run()


def _agg(workers: int = 2, host: HostConfig | None = None, **data: object) -> DeploymentConfig:
    cfg = DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "workers": workers, **data})
    return replace(cfg, host=host)


def _disagg() -> DeploymentConfig:
    return DeploymentConfig.from_dict(
        {"model": "x", "gpu": "h200_sxm", "mode": "disagg", "prefill": {"workers": 2},
         "decode": {"workers": 2}, "kv_transfer": {"gbps": 10.0}}
    )  # fmt: skip


def _planned() -> DeploymentConfig:
    return _agg(
        1,
        planner={"adjustment_interval_s": 0.2, "metric_pulling_interval_s": 0.05,
                 "startup_s": 0.1, "max_workers": 3, "queue_scale_up": 0.2},
    )  # fmt: skip


def _metrics(res: SimResult) -> dict[str, object]:
    out = res.metrics.deterministic_dict()
    out.pop("host", None)
    return out


@pytest.mark.parametrize("make", [_agg, _disagg, _planned])
@pytest.mark.parametrize("closed_loop", [None, 3])
def test_zero_cost_host_equals_no_host(make: object, closed_loop: int | None) -> None:
    cfg = make()  # type: ignore[operator]
    reqs = make_requests(120, rate_rps=60, seed=3, closed_loop=closed_loop)
    base = _sim(cfg, reqs)
    for host in (HostConfig(), HostConfig(api_server_count=1)):
        res = _sim(replace(cfg, host=host), reqs)
        assert res.records.equal(base.records)
        assert _metrics(res) == base.metrics.deterministic_dict()
        assert res.steps == base.steps
        assert res.metrics.host is not None
    assert base.metrics.host is None
    assert "host" not in base.metrics.to_dict()


def _grid(reqs: list[Request], shift_s: float = 0.0) -> list[Request]:
    """Arrivals on a 1 ms grid (so that a shift is exact in integer microseconds)."""
    return [replace(q, arrival_s=round(q.arrival_s, 3) + shift_s) for q in reqs]


def test_unbounded_processes_are_pure_delays() -> None:
    reqs = _grid(make_requests(150, rate_rps=80, seed=5))
    cost = HostConfig(request_us=2000.0, output_token_us=30.0)
    res = _sim(_agg(host=cost), reqs)
    shifted = _sim(_agg(), _grid(reqs, 0.002))
    base = shifted.records
    rec = res.records
    np.testing.assert_array_equal(rec.arrival_us + 2000, base.arrival_us)
    np.testing.assert_array_equal(rec.first_token_us, base.first_token_us + 30)
    np.testing.assert_array_equal(rec.finish_us, base.finish_us + 30)
    np.testing.assert_array_equal(rec.worker, base.worker)
    np.testing.assert_array_equal(rec.cached_tokens, base.cached_tokens)
    assert res.metrics.host is not None
    assert res.metrics.host.tokenize_queue_time.max == 0.0
    assert res.metrics.host.stream_delay.max == 0.0


def test_per_token_tokenisation_delays_each_request_by_its_own_length() -> None:
    reqs = _grid(make_requests(100, rate_rps=50, seed=6))
    res = _sim(_agg(host=HostConfig(request_us=500.0, input_token_us=2.0)), reqs)
    moved = [replace(q, arrival_s=q.arrival_s + (500 + 2 * q.input_tokens) / 1e6) for q in reqs]
    base = _sim(_agg(), moved).records
    np.testing.assert_array_equal(res.records.first_token_us, base.first_token_us)
    np.testing.assert_array_equal(res.records.finish_us, base.finish_us)
    np.testing.assert_array_equal(
        res.records.arrival_us, np.round([q.arrival_s * 1e6 for q in reqs])
    )


def test_many_processes_approach_the_unbounded_host() -> None:
    reqs = make_requests(150, rate_rps=80, seed=7)
    free_host = HostConfig(request_us=1200.0, input_token_us=1.1, output_token_us=70.0)
    free = _sim(_agg(host=free_host), reqs).records
    many = _sim(_agg(host=replace(free_host, api_server_count=4096)), reqs).records
    np.testing.assert_array_equal(many.arrival_us, free.arrival_us)
    np.testing.assert_array_equal(many.worker, free.worker)
    # the fluid clock of 4096 processes has a backlog below a microsecond
    assert np.abs(many.first_token_us - free.first_token_us).max() <= 1
    assert np.abs(many.finish_us - free.finish_us).max() <= 1


def _sweep(processes: int | None, loads: list[float]) -> list[tuple[float, float]]:
    """(TTFT avg, ITL avg) in ms over a sweep of the same requests replayed faster."""
    reqs = make_requests(400, rate_rps=10, seed=11, input_range=(100, 1000),
                         output_range=(100, 400))  # fmt: skip
    host = HostConfig(api_server_count=processes, request_us=1200.0, input_token_us=1.1,
                      output_token_us=200.0)  # fmt: skip
    out = []
    for load in loads:
        m = _sim(_agg(workers=1, host=host), reqs, speedup=load).metrics
        out.append((m.time_to_first_token.avg, m.inter_token_latency.avg))
    return out


def test_host_saturation_raises_ttft_monotonically_with_load() -> None:
    loads = [0.5, 1.0, 2.0, 3.0, 4.0, 6.0]
    one = _sweep(1, loads)
    free = _sweep(None, loads)
    ttft = [t for t, _ in one]
    assert ttft == sorted(ttft)  # monotone in load
    # below the knee the host costs little more than its delays ...
    assert one[0][0] < free[0][0] + 5.0
    # ... beyond it TTFT and ITL grow far past what the engine alone gives
    assert one[-1][0] > 10 * free[-1][0]
    assert one[-1][1] > 2 * free[-1][1]
    # more processes move the knee out
    two = _sweep(2, loads[-1:])
    assert free[-1][0] <= two[0][0] < one[-1][0]


def test_closed_loop_clients_wait_for_the_streamed_answer() -> None:
    reqs = make_requests(200, seed=2, closed_loop=8, output_range=(100, 300))
    host = HostConfig(api_server_count=1, output_token_us=2000.0)
    res = _sim(_agg(workers=1, host=host), reqs)
    base = _sim(_agg(workers=1), reqs)
    # the saturated streamer throttles the clients: fewer requests per second
    assert res.metrics.request_throughput < 0.8 * base.metrics.request_throughput
    rec = res.records
    for q in reqs:
        if q.after_id is not None:  # released once its predecessor's last token arrived
            assert rec.arrival_us[q.id] >= rec.finish_us[q.after_id]


def _host(r: random.Random) -> HostConfig:
    return HostConfig(
        api_server_count=r.choice([None, 1, 2, 8]),
        request_us=r.choice([0.0, 50.0, 2000.0, 20_000.0]),
        input_token_us=r.choice([0.0, 0.5, 5.0]),
        output_token_us=r.choice([0.0, 20.0, 500.0, 5000.0]),
    )


def _check(cfg: DeploymentConfig, reqs: list[Request], kv: int | dict[str, int]) -> SimResult:
    fast, fast_busy = _run(cfg, reqs, kv, ff=True)
    slow, slow_busy = _run(cfg, reqs, kv, ff=False)
    assert fast.records.equal(slow.records)
    assert fast_busy == slow_busy
    assert fast.metrics.host == slow.metrics.host
    return fast


@pytest.mark.parametrize("start", range(0, 60, 20))
def test_fast_forward_equals_stepping_with_a_host(start: int) -> None:
    queued = streamed = 0
    for n in range(start, start + 20):
        r = random.Random(70_000 + n)
        cfg, reqs, kv = _case(n)
        ccfg, creqs, ckv = _cluster_case(n)
        for res in (
            _check(replace(cfg, host=_host(r)), reqs, kv),
            _check(replace(ccfg, host=_host(r)), creqs, ckv),
        ):
            host = res.metrics.host
            assert host is not None
            queued += host.tokenize_queue_time.max > 0
            streamed += host.stream_delay.max > 0
    assert queued > 0  # the cases do saturate the tokenisers ...
    assert streamed > 0  # ... and the streamers
