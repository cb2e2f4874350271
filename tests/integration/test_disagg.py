"""Disaggregated serving: a prefill pool, a decode pool and the KV-cache link between them.

Small deterministic setups with the exact linear step-time model (``DeploymentPerf`` built by
hand, with ``kv_bytes_per_token`` set so that transfers have a size), except for the bad-input
and real-model cases, which resolve a catalog model with ``timing: roofline``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from dynosim import ConfigError, DeploymentConfig, InfeasibleError, Request, Simulation
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.simulation import SimResult
from tests.conftest import assert_workers_empty, make_requests

ENGINE = {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "block_size": 16}
BYTES_PER_TOKEN = 4096
ROUTERS = ["round_robin", "random", "least_loaded", "kv_aware", "kv_load"]


def disagg_config(**overrides: Any) -> DeploymentConfig:
    """Two prefill and two decode workers of one GPU each, a 100 Gb/s link with 20 us latency."""
    data: dict[str, Any] = {
        "model": "test/model",
        "gpu": "h200_sxm",
        "mode": "disagg",
        "engine": ENGINE,
        "prefill": {"tp": 1, "workers": 2},
        "decode": {"tp": 1, "workers": 2},
        "kv_transfer": {"gbps": 100.0, "latency_us": 20.0},
    }
    data.update(overrides)
    return DeploymentConfig.from_dict(data)


def perf(
    kv_blocks: int = 20_000, *, bytes_per_token: int = BYTES_PER_TOKEN, timing: Any = None
) -> DeploymentPerf:
    return DeploymentPerf(
        timing or LinearStepTime(),
        kv_blocks,
        gpu_hour_usd=2.0,
        kv_bytes_per_token=bytes_per_token,
    )


def run(
    cfg: DeploymentConfig,
    reqs: list[Request],
    *,
    pool_perf: DeploymentPerf | Mapping[str, DeploymentPerf] | None = None,
    ff: bool = True,
    seed: int = 0,
) -> tuple[SimResult, Simulation]:
    """Run to the end and check that every worker is left empty."""
    sim = Simulation(cfg, reqs, seed=seed, fast_forward=ff, perf=pool_perf or perf())
    res = sim.run()
    assert_workers_empty(sim)
    return res, sim


def spaced(sizes: list[int], *, gap_s: float = 1.0, output_tokens: int = 5) -> list[Request]:
    """One request every ``gap_s`` seconds (far enough apart that nothing ever queues)."""
    return [
        Request(id=i, arrival_s=0.1 + i * gap_s, input_tokens=n, output_tokens=output_tokens)
        for i, n in enumerate(sizes)
    ]


# --------------------------------------------------------------------------- conservation
def test_every_request_completes_or_is_rejected_and_kv_bytes_are_conserved() -> None:
    reqs = make_requests(300, rate_rps=30.0, input_range=(2, 3000), output_range=(1, 200))
    n = len(reqs)
    # decode workers hold 600 * 16 = 9600 KV tokens, prefill workers 500 * 16 = 8000
    reqs += [
        Request(id=n, arrival_s=3.0, input_tokens=5000, output_tokens=6000),  # > decode KV
        Request(id=n + 1, arrival_s=4.0, input_tokens=9000, output_tokens=1),  # > prefill KV
        Request(id=n + 2, arrival_s=5.0, input_tokens=8000, output_tokens=1600),  # just fits
    ]
    cfg = disagg_config(max_local_prefill_tokens=300, decode_router="kv_load")
    pools = {"prefill": perf(500, bytes_per_token=4096), "decode": perf(600, bytes_per_token=2048)}
    res, sim = run(cfg, reqs, pool_perf=pools)
    rec = res.records
    assert rec.prefill_worker is not None
    assert rec.transfer_us is not None
    done = rec.completed
    rejected = np.zeros(len(reqs), dtype=bool)
    rejected[list(res.rejections)] = True
    assert np.array_equal(done, ~rejected)  # each request exactly one of the two
    assert res.metrics.completed_requests + res.metrics.rejected_requests == len(reqs)
    assert set(res.rejections) == {n, n + 1}
    assert "decode worker" in res.rejections[n]
    assert "prefill worker" in res.rejections[n + 1]
    for col in (rec.first_token_us, rec.finish_us, rec.worker, rec.prefill_worker):
        assert np.all(col[rejected] == -1)

    remote = rec.prefill_worker >= 0
    local = done & ~remote
    assert remote.sum() > 50
    assert local.sum() > 10
    assert not np.any(remote & rejected)
    # without a full 512-token unit there is no prefix hit: local exactly when short enough
    short = done & (rec.input_tokens < 512)
    assert np.array_equal(local[short], rec.input_tokens[short] <= 300)
    assert np.all(rec.transfer_us[local] == 0)

    # the link moves the larger per-rank KV of the two pools: max(4096, 2048) per token
    expected = int((rec.input_tokens[remote] - 1).sum()) * 4096
    assert res.kv_bytes_sent == res.kv_bytes_received == expected
    assert sim.links is not None
    assert sim.links.transfers == int(remote.sum())

    assert np.all(rec.worker[done] >= 0)
    assert np.all(rec.worker[done] < 2)
    assert np.all(rec.prefill_worker[remote] < 2)
    durations = np.array([sim.links.duration_us(int(t) - 1) for t in rec.input_tokens[remote]])
    assert np.all(rec.transfer_us[remote] >= 20)
    assert np.all(rec.transfer_us[remote] >= durations)
    assert np.all(rec.first_token_us[remote] >= rec.arrival_us[remote] + rec.transfer_us[remote])
    assert np.all(rec.finish_us[done] >= rec.first_token_us[done])
    assert res.metrics.kv_transfer_time.avg == pytest.approx(rec.transfer_us[remote].mean() / 1e3)
    assert res.metrics.kv_transfer_time.max == rec.transfer_us[remote].max() / 1e3
    util = {p.name: p.utilization for p in res.metrics.pools}
    assert 0 < util["prefill"] < 1
    assert 0 < util["decode"] < 1


# ------------------------------------------------------------ conditional disaggregation
@pytest.mark.parametrize("decode_router", ROUTERS)
def test_all_local_prefill_equals_the_decode_pool_alone(decode_router: str) -> None:
    reqs = make_requests(300, rate_rps=25.0, seed=4)
    decode_engine = {"max_num_seqs": 32, "block_size": 32}
    cfg = disagg_config(
        router="random",  # the prefill pool's router is never asked
        decode_router=decode_router,
        prefill={"tp": 1, "workers": 2},
        decode={"tp": 2, "workers": 3, "engine": decode_engine},
        max_local_prefill_tokens=max(r.input_tokens for r in reqs),
    )
    agg = DeploymentConfig.from_dict(
        {
            "model": "test/model",
            "gpu": "h200_sxm",
            "tp": 2,
            "workers": 3,
            "router": decode_router,
            "engine": {**ENGINE, **decode_engine},
        }
    )
    assert cfg.decode is not None
    assert cfg.decode.engine == agg.engine
    p = perf(700)  # scarce enough for preemption
    dis, dsim = run(cfg, reqs, pool_perf=p, seed=3)
    one, _ = run(agg, reqs, pool_perf=p, seed=3)
    assert dis.records.equal(one.records)
    assert one.metrics.preemptions > 0
    for stat in ("time_to_first_token", "inter_token_latency", "request_latency"):
        assert getattr(dis.metrics, stat) == getattr(one.metrics, stat)
    assert dis.kv_bytes_sent == dis.kv_bytes_received == 0
    assert math.isnan(dis.metrics.kv_transfer_time.avg)
    assert all(w.busy_us == 0 and w.steps == 0 for w in dsim.pools["prefill"].workers)
    prefill = next(pm for pm in dis.metrics.pools if pm.name == "prefill")
    assert prefill.utilization == 0.0
    assert math.isnan(prefill.queue_time.avg)  # nothing ever queued there
    decode = next(pm for pm in dis.metrics.pools if pm.name == "decode")
    assert decode.utilization == pytest.approx(one.metrics.utilization)


@pytest.mark.parametrize(
    "max_local",
    [0, 100],
)
def test_round_robin_decode_router_balances_remote_requests(max_local: int) -> None:
    # every prompt is longer than max_local_prefill_tokens: all are prefilled remotely
    reqs = spaced([1000] * 8)
    cfg = disagg_config(
        decode_router="round_robin", decode={"workers": 2}, max_local_prefill_tokens=max_local
    )
    rec = run(cfg, reqs)[0].records
    assert rec.prefill_worker is not None
    assert np.all(rec.prefill_worker >= 0)
    assert np.bincount(rec.worker, minlength=2).tolist() == [4, 4]


# ------------------------------------------------------------------- decode pool sizing
def test_more_decode_workers_never_raise_inter_token_latency() -> None:
    # the prefill pool is the same in every run, so the decode pools see the same arrivals
    reqs = make_requests(
        400, rate_rps=30.0, seed=1, input_range=(200, 2000), output_range=(50, 300)
    )
    timing = LinearStepTime(per_kv_token_us=0.02)  # a step's cost grows with its batch's KV
    previous = None
    itl = []
    for workers in (1, 2, 4, 8):
        cfg = disagg_config(
            prefill={"workers": 4}, decode={"workers": workers}, decode_router="least_loaded"
        )
        m = run(cfg, reqs, pool_perf=perf(timing=timing))[0].metrics
        assert m.completed_requests == len(reqs)
        if previous is not None:
            assert m.inter_token_latency.avg <= previous.avg
            assert m.inter_token_latency.p90 <= previous.p90
        previous = m.inter_token_latency
        itl.append(previous.avg)
    assert itl[-1] < 0.85 * itl[0]  # and it really does fall


# ------------------------------------------------------------------------- KV transfer
def test_link_duration_is_latency_plus_size_over_bandwidth() -> None:
    cfg = disagg_config(kv_transfer={"gbps": 1.0, "latency_us": 500.0})
    res, sim = run(cfg, spaced([1000, 2]))
    assert sim.links is not None
    # 999 tokens x 4096 B x 8 bit / (1 Gb/s = 1e3 bit/us) = 32735.232 us, + 500 us, rounded up
    assert sim.links.duration_us(999) == 33236
    assert sim.links.duration_us(1) == math.ceil(500 + 4096 * 8 / 1e3)
    assert res.records.transfer_us is not None
    assert res.records.transfer_us.tolist() == [33236, sim.links.duration_us(1)]


def test_transfer_time_adds_to_time_to_first_token() -> None:
    sizes = [100, 513, 2000, 2048, 4000, 7777, 8000, 300, 5000, 2]
    reqs = spaced(sizes)
    slow_cfg = disagg_config(kv_transfer={"gbps": 2.0, "latency_us": 300.0})
    fast_cfg = disagg_config(kv_transfer={"gbps": 1e7, "latency_us": 0.0})
    slow, ssim = run(slow_cfg, reqs)
    fast, fsim = run(fast_cfg, reqs)
    assert ssim.links is not None
    assert fsim.links is not None
    s, f = slow.records, fast.records
    assert s.transfer_us is not None
    assert f.transfer_us is not None
    slow_d = np.array([ssim.links.duration_us(n - 1) for n in sizes])
    fast_d = np.array([fsim.links.duration_us(n - 1) for n in sizes])
    assert np.array_equal(s.transfer_us, slow_d)  # idle link: no queueing
    assert np.array_equal(f.transfer_us, fast_d)
    ttft_s = s.first_token_us - s.arrival_us
    ttft_f = f.first_token_us - f.arrival_us
    assert np.array_equal(ttft_s - ttft_f, slow_d - fast_d)
    assert (slow_d - fast_d).max() > 100_000  # the slow link really is slow (~131 ms at 8000)
    # the added time is carried into the end-to-end latency too, and nothing else changes
    assert np.array_equal((s.finish_us - s.first_token_us), (f.finish_us - f.first_token_us))
    gap_ms = slow.metrics.time_to_first_token.avg - fast.metrics.time_to_first_token.avg
    assert gap_ms == pytest.approx((slow_d - fast_d).mean() / 1e3)
    assert slow.metrics.kv_transfer_time.avg == pytest.approx(slow_d.mean() / 1e3)


@pytest.mark.parametrize("decode_workers", [1, 2])
def test_transfers_into_one_decode_worker_queue_first_come_first_served(
    decode_workers: int,
) -> None:
    # 8 prefill workers each take one identical prompt at t=0 and finish at the same instant
    reqs = [Request(id=i, arrival_s=0.0, input_tokens=2000, output_tokens=3) for i in range(8)]
    cfg = disagg_config(
        router="round_robin",
        decode_router="round_robin",
        prefill={"workers": 8},
        decode={"workers": decode_workers},
        kv_transfer={"gbps": 10.0, "latency_us": 100.0},
    )
    res, sim = run(cfg, reqs)
    rec = res.records
    assert rec.transfer_us is not None
    assert rec.prefill_worker is not None
    assert sorted(rec.prefill_worker.tolist()) == list(range(8))
    assert sim.links is not None
    d = sim.links.duration_us(1999)
    assert d == math.ceil(100 + 1999 * 4096 * 8 / 1e4)
    # the k-th transfer into a worker waits for the k-1 before it, each taking d
    position = np.arange(8) // decode_workers + 1
    assert rec.transfer_us.tolist() == (d * position).tolist()
    assert rec.worker.tolist() == [i % decode_workers for i in range(8)]
    # and the decode legs start in that order on each worker
    for w in range(decode_workers):
        mine = rec.worker == w
        assert np.all(np.diff(rec.first_token_us[mine]) > 0)


# ---------------------------------------------------------------- fast-forward parity
@pytest.mark.parametrize(
    ("router", "decode_router"),
    [
        ("round_robin", "least_loaded"),
        ("kv_aware", "kv_load"),
        ("random", "random"),
        ("least_loaded", "kv_aware"),
        ("kv_load", "round_robin"),
    ],
)
@pytest.mark.parametrize("max_local", [0, 600])
@pytest.mark.parametrize("decode_blocks", [20_000, 600])
def test_fast_forward_equals_stepping(
    router: str, decode_router: str, max_local: int, decode_blocks: int
) -> None:
    reqs = make_requests(250, rate_rps=30.0, seed=7, input_range=(2, 4000))
    cfg = disagg_config(
        router=router,
        decode_router=decode_router,
        max_local_prefill_tokens=max_local,
        prefill={"workers": 2},
        decode={"workers": 3, "engine": {"max_num_seqs": 32}},
        kv_transfer={"gbps": 5.0, "latency_us": 50.0},
    )
    pools = {"prefill": perf(3000), "decode": perf(decode_blocks)}
    fast, fsim = run(cfg, reqs, pool_perf=pools, ff=True, seed=11)
    slow, ssim = run(cfg, reqs, pool_perf=pools, ff=False, seed=11)
    assert fast.records.equal(slow.records)
    assert fast.metrics.deterministic_dict() == slow.metrics.deterministic_dict()
    assert [w.busy_us for w in fsim.workers] == [w.busy_us for w in ssim.workers]
    assert fast.kv_bytes_sent == slow.kv_bytes_sent > 0
    assert fast.events < slow.events / 2  # the fast path really skips steps
    if decode_blocks == 600:
        assert fast.metrics.preemptions > 0
    assert fast.records.prefill_worker is not None
    local = fast.records.completed & (fast.records.prefill_worker < 0)
    assert (local.sum() > 0) == (max_local > 0)


@pytest.mark.parametrize("ff", [True, False])
def test_trtllm_batch_waiting_never_holds_a_transferred_request(ff: bool) -> None:
    """A decode worker's requests whose KV came over the link are generation requests for
    TRT-LLM (its batch waiting holds context requests only), and a prefill worker decodes
    nothing: batch waiting changes no record of a disaggregated deployment without local
    prefill. (A decode worker that held arrivals would delay their second token.)"""
    reqs = make_requests(200, rate_rps=40.0, seed=3, input_range=(2, 3000))
    base = {"backend": "trtllm", "decode": {"workers": 2}}
    wait = {**ENGINE, "batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}
    plain, _ = run(disagg_config(**base), reqs, ff=ff)
    waiting, _ = run(disagg_config(**base, engine=wait), reqs, ff=ff)
    assert waiting.records.equal(plain.records)
    assert plain.records.completed.all()


def test_trtllm_batch_waiting_on_local_prefills_keeps_fast_forward_exact() -> None:
    """Short prompts prefilled on the decode workers are context requests and wait there,
    beside transferred requests that do not: both modes give the same records."""
    reqs = make_requests(200, rate_rps=40.0, seed=5, input_range=(2, 3000))
    wait = {**ENGINE, "batch_wait_timeout_iters": 7, "batch_wait_max_tokens_ratio": 0.9}
    cfg = disagg_config(backend="trtllm", engine=wait, max_local_prefill_tokens=1000)
    fast, _ = run(cfg, reqs, ff=True)
    slow, _ = run(cfg, reqs, ff=False)
    assert fast.records.equal(slow.records)
    plain, _ = run(disagg_config(backend="trtllm", max_local_prefill_tokens=1000), reqs)
    assert not fast.records.equal(plain.records)  # local prefills did wait


def test_fast_forward_equals_stepping_closed_loop_without_chunking() -> None:
    reqs = make_requests(200, closed_loop=16, input_range=(2, 2048), output_range=(1, 400))
    engine = {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 2048,
        "block_size": 64,
        "enable_chunked_prefill": False,
    }
    cfg = disagg_config(
        engine=engine,
        router="kv_aware",
        decode_router="kv_load",
        max_local_prefill_tokens=256,
        decode={"workers": 2, "engine": {"block_size": 16}},
    )
    pools = {"prefill": perf(200), "decode": perf(700)}
    fast, _ = run(cfg, reqs, pool_perf=pools, ff=True)
    slow, _ = run(cfg, reqs, pool_perf=pools, ff=False)
    assert fast.records.equal(slow.records)
    assert fast.metrics.deterministic_dict() == slow.metrics.deterministic_dict()
    assert fast.metrics.completed_requests == len(reqs)


# ----------------------------------------------------------------------- real models
def _real(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": "Qwen/Qwen3-32B",
        "gpu": "h200_sxm",
        "timing": "roofline",
        "mode": "disagg",
        "prefill": {"tp": 1, "workers": 1},
        "decode": {"tp": 2, "workers": 1},
    }
    data.update(overrides)
    return data


def test_real_model_transfers_the_larger_kv_shard_over_nvlink_by_default() -> None:
    cfg = DeploymentConfig.from_dict(_real())
    reqs = spaced([1000, 3000, 17], gap_s=2.0)
    sim = Simulation(cfg, reqs)
    res = sim.run()
    assert res.metrics.completed_requests == 3
    # a rank of Qwen3-32B stores 2 (K,V) x 64 layers x ceil(8 kv heads / tp) x 128 x 2 B
    prefill_rank, decode_rank = 2 * 64 * 8 * 128 * 2, 2 * 64 * 4 * 128 * 2
    assert sim.pools["prefill"].perf.kv_bytes_per_token == prefill_rank
    assert sim.pools["decode"].perf.kv_bytes_per_token == decode_rank
    assert res.kv_bytes_sent == res.kv_bytes_received == (999 + 2999 + 16) * prefill_rank
    assert sim.links is not None
    # 3 GPUs fit one node: NVLink, 450 GB/s one way on an H200 = 3600 Gb/s, 10 us
    assert sim.links.latency_us == 10.0
    assert sim.links.us_per_byte == pytest.approx(8 / 3600e3)
    assert res.records.transfer_us is not None
    assert res.records.transfer_us.tolist() == [
        sim.links.duration_us(n - 1) for n in (1000, 3000, 17)
    ]


def test_auto_link_is_rdma_when_the_pools_can_outgrow_a_node() -> None:
    cfg = DeploymentConfig.from_dict(_real(decode={"tp": 2, "workers": 4}))  # 9 GPUs
    sim = Simulation(cfg, spaced([100]))
    assert sim.links is not None
    assert sim.links.latency_us == 50.0
    assert sim.links.us_per_byte == pytest.approx(8 / 400e3)


# ------------------------------------------------------------------------- bad input
def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    assert text
    return text


@pytest.mark.parametrize(
    ("pool", "field"),
    [("decode", "decode.tp"), ("prefill", "prefill.tp")],
)
def test_pool_tp_that_does_not_divide_the_heads(pool: str, field: str) -> None:
    # Qwen3-8B has 32 attention heads: tp=64 is a power of two that does not divide them
    data = _real(model="Qwen/Qwen3-8B")
    data[pool] = {"tp": 64, "workers": 1}
    cfg = DeploymentConfig.from_dict(data)
    with pytest.raises(ConfigError) as exc:
        Simulation(cfg, spaced([100]))
    assert exc.value.field == field
    assert _one_line(exc).startswith(f"{field}: got 64")
    assert "32 attention heads" in str(exc.value)


def test_decode_pool_that_does_not_fit_in_memory() -> None:
    # 64 GB of bf16 weights on one GPU allowed to use 40% of 141 GiB: no room for a KV chunk
    data = _real(decode={"tp": 1, "workers": 1, "engine": {"gpu_memory_utilization": 0.4}})
    with pytest.raises(InfeasibleError) as exc:
        Simulation(DeploymentConfig.from_dict(data), spaced([100]))
    assert _one_line(exc).startswith("decode pool: ")
    assert "tp=1" in str(exc.value)
    # the same pool as the prefill pool is named as such
    data = _real(prefill={"tp": 1, "workers": 1, "engine": {"gpu_memory_utilization": 0.4}})
    with pytest.raises(InfeasibleError) as exc:
        Simulation(DeploymentConfig.from_dict(data), spaced([100]))
    assert _one_line(exc).startswith("prefill pool: ")


def test_request_larger_than_a_decode_worker_kv_pool_is_rejected_with_a_reason() -> None:
    cfg = disagg_config()
    reqs = [
        Request(id=0, arrival_s=0.0, input_tokens=100, output_tokens=200),  # 299 tokens: fits
        Request(id=1, arrival_s=0.0, input_tokens=200, output_tokens=200),  # 399 > 320
        Request(id=2, arrival_s=0.0, input_tokens=321, output_tokens=1),  # the prompt alone
    ]
    res, _ = run(cfg, reqs, pool_perf={"prefill": perf(1000), "decode": perf(20)})
    assert res.records.completed.tolist() == [True, False, False]
    assert res.rejections[1] == "needs 399 KV tokens; a decode worker holds 320"
    assert res.rejections[2] == "needs 321 KV tokens; a decode worker holds 320"


BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"kv_transfer": {"gbps": -1.0}}, "kv_transfer.gbps"),
    ({"kv_transfer": {"gbps": 0}}, "kv_transfer.gbps"),
    ({"kv_transfer": {"gbps": float("nan")}}, "kv_transfer.gbps"),
    ({"kv_transfer": {"gbps": float("inf")}}, "kv_transfer.gbps"),
    ({"kv_transfer": {"gbps": "fast"}}, "kv_transfer.gbps"),
    ({"kv_transfer": {"latency_us": -5}}, "kv_transfer.latency_us"),
    ({"kv_transfer": {"link": "ethernet"}}, "kv_transfer.link"),
    ({"kv_transfer": {"bandwidth": 10}}, "kv_transfer.bandwidth"),
    ({"tp": 2}, "tp"),
    ({"workers": 2}, "workers"),
    ({"decode": None}, "decode"),
    ({"decode": {"tp": 3}}, "decode.tp"),
    ({"prefill": {"workers": 0}}, "prefill.workers"),
    ({"decode": {"engine": {"block_size": 17}}}, "decode.engine.block_size"),
    ({"prefill": {"engine": {"max_num_seqs": 0}}}, "prefill.engine.max_num_seqs"),
    ({"decode": {"gpus": 4}}, "decode.gpus"),
    ({"decode_router": "nearest"}, "decode_router"),
    ({"max_local_prefill_tokens": -1}, "max_local_prefill_tokens"),
]


@pytest.mark.parametrize(("override", "field"), BAD_FIELDS)
def test_bad_disagg_field_is_named(override: dict[str, Any], field: str) -> None:
    data = _real(**override)
    if "decode" in override and override["decode"] is None:
        del data["decode"]
    with pytest.raises(ConfigError) as exc:
        DeploymentConfig.from_dict(data)
    assert exc.value.field == field
    assert _one_line(exc).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"prefill": {"tp": 1, "workers": 1}}, "prefill"),
        ({"max_local_prefill_tokens": 100}, "max_local_prefill_tokens"),
    ],
)
def test_disagg_only_fields_in_agg_mode_are_refused(override: dict[str, Any], field: str) -> None:
    data = {"model": "Qwen/Qwen3-32B", "gpu": "h200_sxm", **override}
    with pytest.raises(ConfigError) as exc:
        DeploymentConfig.from_dict(data)
    assert exc.value.field == field
    assert "mode" in _one_line(exc)


def test_config_round_trips_through_plain_data() -> None:
    cfg = disagg_config(
        max_local_prefill_tokens=128,
        decode={"tp": 2, "workers": 3, "engine": {"max_num_seqs": 8}},
        planner={"policy": "sla", "decode": {"min_workers": 1, "max_workers": 4}},
    )
    again = DeploymentConfig.from_dict(cfg.to_dict())
    assert again == cfg
    assert "tp" not in cfg.to_dict()
    assert "workers" not in cfg.to_dict()
    assert cfg.gpus == 2 + 6
    assert cfg.peak_gpus == 8 * 1 + 4 * 2  # the prefill pool keeps the planner's default max
    assert cfg.pool_view("decode").engine.max_num_seqs == 8
    assert cfg.pool_view("prefill").engine.max_num_seqs == 64
