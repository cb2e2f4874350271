"""Benchmark clients: the requests each tool sends, and the figures each tool reports."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dynosim import DeploymentConfig, Simulation
from dynosim.errors import ConfigError, WorkloadError
from dynosim.metrics import RequestRecords
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.validation.client_metrics import client_metrics
from dynosim.workload import (
    BenchmarkClient,
    ClientWorkload,
    client_requests,
    load_workload_file,
    parse_workload_file,
)


def test_inferencex_defaults_and_warmup_copies() -> None:
    c = BenchmarkClient(name="inferencex", concurrency=4, isl=1000, osl=100, seed=3)
    reqs = client_requests(c)
    assert (c.measured, c.warmup_count, c.ratio) == (40, 8, 0.8)
    assert len(reqs) == 48
    warm, measured = reqs[:8], reqs[8:]
    first = measured[0]
    for w in warm:  # copies of the first measured prompt
        assert (w.input_tokens, w.output_tokens, w.block_hashes) == (
            first.input_tokens, first.output_tokens, first.block_hashes)  # fmt: skip
    isl = np.array([r.input_tokens for r in measured])
    osl = np.array([r.output_tokens for r in measured])
    assert isl.min() >= 800
    assert isl.max() <= 1000
    assert len(set(isl)) > 10
    assert osl.min() >= 80
    assert osl.max() <= 100
    hashes = [h for r in measured for h in r.block_hashes]
    assert len(hashes) == len(set(hashes))  # no shared prefix among measured prompts
    # two closed loops: the warm-ups' (4 at once, then each follows its client's previous)
    # and the measured phase's, whose first 4 wait for the warm-up phase to drain
    assert [r.after_id for r in reqs[:4]] == [None] * 4
    assert all(r.arrival_s == 0.0 for r in reqs[:4])
    assert [r.after_id for r in reqs[4:8]] == [0, 1, 2, 3]
    assert [(r.after_id, r.after_warmup, r.arrival_s) for r in reqs[8:12]] == [
        (None, True, 0.0)
    ] * 4
    assert [r.after_id for r in reqs[12:14]] == [8, 9]
    assert not any(r.after_warmup for r in reqs[:8] + reqs[12:])


def test_seeded_and_reproducible() -> None:
    a = client_requests(BenchmarkClient(name="inferencex", concurrency=2, isl=500, osl=50, seed=1))
    b = client_requests(BenchmarkClient(name="inferencex", concurrency=2, isl=500, osl=50, seed=1))
    c = client_requests(BenchmarkClient(name="inferencex", concurrency=2, isl=500, osl=50, seed=2))
    assert a == b
    assert [r.input_tokens for r in a] != [r.input_tokens for r in c]


def test_vllm_bench_and_aiperf_defaults() -> None:
    v = BenchmarkClient(name="vllm-bench", concurrency=8, isl=256, osl=64)
    reqs = client_requests(v)
    assert (v.measured, v.warmup_count) == (1000, 0)
    assert {r.input_tokens for r in reqs} == {256}
    assert {r.output_tokens for r in reqs} == {64}
    with pytest.raises(ConfigError, match=r"client\.requests"):
        BenchmarkClient(name="aiperf", concurrency=8, isl=256, osl=64)
    a = BenchmarkClient(name="aiperf", concurrency=8, isl=256, osl=64, requests=20, warmups=4)
    assert len(client_requests(a)) == 24


def test_ramp_spreads_the_first_requests() -> None:
    c = BenchmarkClient(name="vllm-bench", concurrency=4, isl=10, osl=2, requests=8, ramp_up_s=2.0)
    assert [r.arrival_s for r in client_requests(c)[:4]] == [0.0, 0.5, 1.0, 1.5]


def test_two_clients_on_a_linear_engine_give_the_hand_computed_schedule() -> None:
    # 2 clients, 4 requests of 100 prompt tokens and 3 output tokens, one idle worker, no
    # warm-up. Both clients send at 0. An idle worker forms its first step once every request
    # of that instant has reached it, so both prompts are prefilled in one step:
    # 5000 + 0.15 * 200 + 20 * 2 = 5070 us, the TTFT of both.
    c = BenchmarkClient(name="vllm-bench", concurrency=2, isl=100, osl=3, requests=4)
    cfg = DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "workers": 1})
    perf = DeploymentPerf(LinearStepTime(), 10_000, gpu_hour_usd=1.0)
    rec = Simulation(cfg, client_requests(c), perf=perf).run().records
    ttft = rec.first_token_us - rec.arrival_us
    assert ttft[:2].tolist() == [5070, 5070]
    assert rec.arrival_us[0] == rec.arrival_us[1] == 0
    # closed loop: request 2 is client 0's next, sent when request 0 completes; 3 after 1
    assert rec.arrival_us[2] == rec.finish_us[0]
    assert rec.arrival_us[3] == rec.finish_us[1]
    assert (rec.finish_us > 0).all()


def test_measured_phase_starts_when_the_last_warmup_completes() -> None:
    # 2 clients, 2 warm-ups then 4 measured requests (100 prompt tokens, 3 output tokens) on
    # the linear engine of the test above. The warm-ups share a first step (5,070 us) and
    # complete together; the measured phase then starts from an empty engine, its two first
    # requests at that instant (not each as its own client's warm-up completes), so they see
    # exactly the warm-ups' schedule shifted by the warm-up phase's end.
    c = BenchmarkClient(name="vllm-bench", concurrency=2, isl=100, osl=3, requests=4, warmups=2)
    cfg = DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "workers": 1})
    perf = DeploymentPerf(LinearStepTime(), 10_000, gpu_hour_usd=1.0)
    rec = Simulation(cfg, client_requests(c), perf=perf).run(warmup_requests=2).records
    end = int(rec.finish_us[:2].max())
    assert rec.arrival_us[2:4].tolist() == [end, end]
    ttft = rec.first_token_us - rec.arrival_us
    assert ttft[:4].tolist() == [5070] * 4
    assert (rec.finish_us[2:4] - end).tolist() == rec.finish_us[:2].tolist()
    # a warm-up that finishes late holds the whole measured phase: one warm-up of 30 tokens
    slow = [replace(r, output_tokens=30) if r.id == 1 else r for r in client_requests(c)]
    rec = Simulation(cfg, slow, perf=perf).run(warmup_requests=2).records
    assert rec.arrival_us[2] == rec.arrival_us[3] == rec.finish_us[1] > rec.finish_us[0]


def _records(ttft_us: list[int], decode_us: list[int], osl: list[int]) -> RequestRecords:
    n = len(osl)
    arrival = np.zeros(n, dtype=np.int64)
    first = np.array(ttft_us, dtype=np.int64)
    return RequestRecords(
        arrival_us=arrival,
        first_token_us=first,
        finish_us=first + np.array(decode_us, dtype=np.int64),
        input_tokens=np.full(n, 10, dtype=np.int64),
        output_tokens=np.array(osl, dtype=np.int64),
        cached_tokens=np.zeros(n, dtype=np.int64),
        worker=np.zeros(n, dtype=np.int64),
        preemptions=np.zeros(n, dtype=np.int64),
    )


def test_tpot_is_per_request_and_itl_token_weighted() -> None:
    # request 0: 11 tokens in 100 ms after the first (10 ms each); request 1: 2 tokens, 50 ms
    rec = _records([1000, 3000], [100_000, 50_000], [11, 2])
    m = client_metrics(rec, "inferencex", warmup=0)
    assert m["mean_ttft_ms"] == pytest.approx(2.0)
    assert m["mean_tpot_ms"] == pytest.approx((10.0 + 50.0) / 2)
    assert m["mean_itl_ms"] == pytest.approx(150.0 / 11)
    a = client_metrics(rec, "aiperf", warmup=0)
    assert a["inter_token_latency.avg"] == pytest.approx(30.0)


def test_warmups_never_enter_the_figures() -> None:
    # the first completion (request 1, finishing first) is the warm-up: only request 0 counts
    rec = _records([1000, 500], [100_000, 1_000], [11, 2])
    m = client_metrics(rec, "vllm-bench", warmup=1)
    assert m["mean_ttft_ms"] == pytest.approx(1.0)
    assert m["mean_tpot_ms"] == pytest.approx(10.0)


def test_workload_file(tmp_path: Path) -> None:
    f = tmp_path / "bench.yaml"
    f.write_text("client: {name: inferencex, concurrency: 2, isl: 64, osl: 8}\n")
    parsed = parse_workload_file(f)
    assert isinstance(parsed, ClientWorkload)
    assert parsed.name == "bench"
    w = load_workload_file(f)
    assert (len(w.requests), w.warmup_requests) == (24, 4)
    f.write_text("client: {name: inferencex, concurrency: 2, isl: 64, osl: 8, batch: 3}\n")
    with pytest.raises(WorkloadError, match=r"bench.yaml: client.batch"):
        parse_workload_file(f)
    f.write_text("client: {name: genai, concurrency: 2, isl: 64, osl: 8}\n")
    with pytest.raises(WorkloadError, match=r"client.name: got 'genai'"):
        parse_workload_file(f)
    f.write_text("client: {name: vllm-bench, concurrency: 0, isl: 64, osl: 8}\n")
    with pytest.raises(WorkloadError, match=r"client.concurrency"):
        parse_workload_file(f)


def test_a_client_workload_is_a_concurrency_axis_for_studies() -> None:
    from search.study.load import load_axis

    here = Path(__file__).resolve().parents[3] / "examples" / "inferencex_c64.yaml"
    axis = load_axis({"file": str(here)})
    assert (axis.kind, axis.base) == ("concurrency", 64.0)
    reqs, speedup = axis.workload_at(16, ())
    # InferenceX at 16 clients: 160 measured requests after 32 warm-ups
    assert (len(reqs), speedup) == (192, 1.0)
    assert axis.warmup_at(16, 999) == 32


def test_send_gaps_change_a_two_client_schedule_by_the_stated_jitter_only() -> None:
    """2 ms +- 1 ms between a completion and the next send: lengths and order stay the same."""
    base = BenchmarkClient(name="vllm-bench", concurrency=2, isl=100, osl=3, requests=6, seed=7)
    drift = replace(base, send_overhead_s=0.002, send_jitter_s=0.001)
    plain, jittered = client_requests(base), client_requests(drift)
    gaps = [r.arrival_s if r.after_id is None else r.delay_s for r in jittered]
    assert all(0.001 <= g <= 0.003 for g in gaps)
    assert len(set(gaps)) == len(gaps)  # every request draws its own gap
    for p, j, g in zip(plain, jittered, gaps, strict=True):  # nothing else moves
        assert replace(j, arrival_s=p.arrival_s, delay_s=p.delay_s) == p
        assert (j.arrival_s if j.after_id is None else j.delay_s) == g
    assert client_requests(drift) == jittered  # seeded: the same gaps again
    # No jitter: every gap is the overhead itself, with no draw.
    fixed = client_requests(replace(base, send_overhead_s=0.002))
    assert [r.arrival_s for r in fixed[:2]] + [r.delay_s for r in fixed[2:]] == [0.002] * 6

    # On the linear engine the two clients no longer start in lockstep: each request is sent
    # its own gap after its client's previous one completes (after its start, for the first).
    cfg = DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "workers": 1})
    perf = DeploymentPerf(LinearStepTime(), 10_000, gpu_hour_usd=1.0)
    rec = Simulation(cfg, jittered, perf=perf).run().records
    us = [round(g * 1e6) for g in gaps]
    assert rec.arrival_us[:2].tolist() == us[:2]
    for k in range(2, 6):
        assert rec.arrival_us[k] == rec.finish_us[k - 2] + us[k]
    assert rec.arrival_us[0] != rec.arrival_us[1]


def test_a_send_gap_must_be_a_small_non_negative_time() -> None:
    with pytest.raises(ConfigError, match=r"client.send_jitter_s: got 0.5; allowed: at most"):
        BenchmarkClient(name="aiperf", concurrency=2, isl=1, osl=1, requests=2,
                        send_overhead_s=0.1, send_jitter_s=0.5)  # fmt: skip
    with pytest.raises(ConfigError, match=r"client.send_overhead_s: got -1"):
        BenchmarkClient(name="aiperf", concurrency=2, isl=1, osl=1, requests=2,
                        send_overhead_s=-1)  # fmt: skip


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_a_measured_phase_after_warmups_is_a_run_from_scratch(backend: str) -> None:
    # Without prefix caching nothing of the warm-ups stays in the engine, so the measured
    # requests see exactly what they would with no warm-up at all: the same TTFT and latency,
    # request by request (only shifted in time by the warm-up phase).
    cfg = DeploymentConfig.from_dict(
        {"model": "x", "gpu": "h200_sxm", "workers": 2, "backend": backend,
         "engine": {"enable_prefix_caching": False, "max_num_seqs": 8,
                    "max_num_batched_tokens": 512}}
    )  # fmt: skip
    perf = DeploymentPerf(LinearStepTime(), 10_000, gpu_hour_usd=1.0)
    seen = []
    for warmups in (0, 12):
        c = BenchmarkClient(name="inferencex", concurrency=6, isl=700, osl=30, requests=30,
                            warmups=warmups, seed=5)  # fmt: skip
        rec = Simulation(cfg, client_requests(c), perf=perf).run(warmup_requests=warmups).records
        ttft = (rec.first_token_us - rec.arrival_us)[warmups:]
        e2e = (rec.finish_us - rec.arrival_us)[warmups:]
        seen.append((ttft.tolist(), e2e.tolist()))
    assert seen[0] == seen[1]
