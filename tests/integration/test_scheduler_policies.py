"""The backends' scheduling policies: vLLM v1, SGLang and TRT-LLM behind one worker.

Every policy keeps the worker's exactness contract (fast-forward equals stepping on the random
cases of the fuzz test, with each policy's own knobs drawn at random), and each shows the
behaviour that defines it: SGLang without mixed chunks never puts a prefill and a decode in
one step (and with them it does), SGLang retracts under memory pressure, TRT-LLM's
GUARANTEED_NO_EVICT never preempts where vLLM and MAX_UTILIZATION do, ``lpm`` serves a cached
prefix first.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import pytest

from dynosim import DeploymentConfig, Request, Simulation
from dynosim.config import HostConfig, SpeculativeConfig
from dynosim.engine.policies import SglangWorker, TrtllmWorker, VllmWorker, worker_class
from dynosim.engine.policies.sglang import CLIP_MAX_NEW_TOKENS
from dynosim.errors import ConfigError
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.types import HASH_BLOCK_TOKENS
from tests.conftest import assert_workers_empty, make_requests
from tests.integration.test_fast_forward_fuzz import _case, _check


@dataclass
class RecordingStepTime:
    """A linear step-time model that records the shape of every step it prices."""

    inner: LinearStepTime = field(default_factory=LinearStepTime)
    shapes: list[tuple[int, int]] = field(default_factory=list)  # (prefill requests, decodes)

    def step_us(
        self, prefill: Sequence[tuple[int, int]], n_decode: int, decode_kv_tokens: int
    ) -> int:
        self.shapes.append((len(prefill), n_decode))
        return self.inner.step_us(prefill, n_decode, decode_kv_tokens)

    def decode_run_us(
        self, n_decode: int, decode_kv_tokens: int, n_steps: int
    ) -> npt.NDArray[np.int64]:
        self.shapes.extend([(0, n_decode)] * n_steps)
        return self.inner.decode_run_us(n_decode, decode_kv_tokens, n_steps)


def _sim(
    cfg: DeploymentConfig, reqs: list[Request], kv_blocks: int, timing: object | None = None
) -> Simulation:
    t = timing if timing is not None else LinearStepTime()
    perf = DeploymentPerf(t, kv_blocks, gpu_hour_usd=1.0, kv_bytes_per_token=4096)  # type: ignore[arg-type]
    return Simulation(cfg, reqs, perf=perf)


def _cfg(backend: str, **engine: object) -> DeploymentConfig:
    base: dict[str, object] = {"max_num_seqs": 64, "max_num_batched_tokens": 2048}
    return DeploymentConfig.from_dict(
        {"model": "x", "gpu": "h200_sxm", "backend": backend, "engine": base | engine}
    )


# ------------------------------------------------------------------ exactness, every policy
def _policy_variant(n: int) -> tuple[DeploymentConfig, list[Request], int]:
    """Fuzz case ``n`` served by a random backend with random policy knobs."""
    cfg, reqs, kv = _case(n)
    r = random.Random(50_000 + n)
    backend = r.choice(["sglang", "sglang", "trtllm"])
    engine = cfg.engine
    if backend == "sglang":
        bs = r.choice([engine.block_size, 1, 4])
        kv = kv * engine.block_size // bs
        engine = replace(
            engine,
            block_size=bs,
            enable_mixed_chunk=r.random() < 0.4,
            max_prefill_tokens=r.choice([None, engine.max_num_batched_tokens, 300]),
            schedule_policy=r.choice(["fcfs", "lpm"]),
            schedule_conservativeness=r.choice([None, 0.3, 1.0, 2.0]),
            scheduler_recv_interval=r.choice([None, None, 2, 7, 30]),
        )
    else:
        engine = replace(
            engine,
            capacity_scheduler_policy=r.choice(["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"]),
            batch_wait_timeout_iters=r.choice([None, None, 1, 3, 20]),
            batch_wait_max_tokens_ratio=r.choice([None, 0.2, 0.9]),
        )
    return replace(cfg, backend=backend, engine=engine), reqs, kv  # type: ignore[arg-type]


@pytest.mark.parametrize("start", range(0, 240, 60))
def test_fast_forward_equals_stepping_for_every_policy(start: int) -> None:
    seen: set[str] = set()
    for n in range(start, start + 60):
        cfg, reqs, kv = _policy_variant(n)
        _check(cfg, reqs, kv)
        seen.add(cfg.backend)
    assert seen == {"sglang", "trtllm"}


@pytest.mark.parametrize("start", [0, 40])
def test_fast_forward_equals_stepping_for_every_policy_with_speculation_and_a_host(
    start: int,
) -> None:
    """The policies' own admission (reservations, retraction, prefill-only steps) with the
    extra KV of speculative decoding and the host's per-step token queue."""
    seen: set[str] = set()
    for n in range(start, start + 40):
        cfg, reqs, kv = _policy_variant(n)
        r = random.Random(90_000 + n)
        count = r.choice([None, 1, 2])
        processes = {"vllm": "api_server_count", "sglang": "tokenizer_workers"}.get(cfg.backend)
        host = HostConfig(
            output_token_us=r.choice([20.0, 500.0]),
            request_us=r.choice([0.0, 2000.0]),
            **({processes: count} if processes else {}),  # type: ignore[arg-type]
        )
        spec = SpeculativeConfig(
            num_speculative_tokens=r.choice([1, 3]), acceptance=r.choice([0.0, 0.7, 1.0]),
            sampling=r.choice(["expected", "sampled"]),
        )  # fmt: skip
        _check(replace(cfg, speculative=spec, host=host), reqs, kv)
        seen.add(cfg.backend)
    assert seen == {"sglang", "trtllm"}


def test_worker_class_follows_the_backend() -> None:
    assert worker_class("vllm") is VllmWorker
    assert worker_class("sglang") is SglangWorker
    assert worker_class("trtllm") is TrtllmWorker
    assert worker_class("trtllm", "MAX_UTILIZATION") is not TrtllmWorker


# ------------------------------------------------------------------------------ SGLang
def test_sglang_without_mixed_chunks_never_mixes_prefill_and_decode() -> None:
    reqs = make_requests(200, rate_rps=200, seed=3, input_range=(100, 3000))
    for mixed, expect_mixed in ((False, False), (True, True)):
        timing = RecordingStepTime()
        cfg = _cfg("sglang", enable_mixed_chunk=mixed)
        sim = _sim(cfg, reqs, 20_000, timing)
        res = sim.run()
        assert res.metrics.completed_requests == len(reqs)
        both = sum(1 for p, d in timing.shapes if p and d)
        assert (both > 0) is expect_mixed, (mixed, both)
    # vLLM mixes them too: the difference is the policy's
    timing = RecordingStepTime()
    _sim(_cfg("vllm"), reqs, 20_000, timing).run()
    assert any(p and d for p, d in timing.shapes)


def test_sglang_prefill_first_stalls_decoding_and_costs_itl() -> None:
    """Alternating batches: every admitted prompt pauses the decoders, so ITL is worse."""
    reqs = make_requests(300, rate_rps=40, seed=5, input_range=(500, 3000), output_range=(50, 300))
    itl = {}
    for mixed in (False, True):
        res = _sim(_cfg("sglang", enable_mixed_chunk=mixed), reqs, 50_000).run()
        itl[mixed] = res.metrics.inter_token_latency.avg
    assert itl[False] > itl[True]


def test_sglang_retracts_under_memory_pressure_and_finishes_everything() -> None:
    reqs = make_requests(60, rate_rps=1000, seed=1, input_range=(50, 400), output_range=(200, 600))
    cfg = _cfg("sglang", schedule_conservativeness=0.1, block_size=16)
    sim = _sim(cfg, reqs, 300)
    res = sim.run()
    assert res.metrics.completed_requests == len(reqs)
    retractions = sum(w.retractions for w in sim.workers if isinstance(w, SglangWorker))
    assert retractions > 0
    assert_workers_empty(sim)
    assert int(res.records.preemptions.sum()) == retractions  # a retraction is a recompute


def test_sglang_new_token_ratio_decays_to_its_floor_and_resets_when_idle() -> None:
    cfg = _cfg("sglang", schedule_conservativeness=1.0)
    reqs = make_requests(1, seed=0, input_range=(100, 101), output_range=(900, 901))
    sim = _sim(cfg, reqs, 10_000)
    w = sim.workers[0]
    assert isinstance(w, SglangWorker)
    assert w.new_token_ratio == pytest.approx(0.7)
    w.decode_steps = 300
    assert w.new_token_ratio == pytest.approx(0.7 - 300 * (0.7 - 0.098) / 600)
    w.decode_steps = 10_000
    assert w.new_token_ratio == pytest.approx(0.7 * 0.14)
    w.on_idle()
    assert w.new_token_ratio == pytest.approx(0.7)
    sim.run()
    assert w.new_token_ratio == pytest.approx(0.7)  # it ended idle


def test_sglang_reservation_holds_back_admission() -> None:
    """Two long-output requests that fit the KV pool together are admitted one by one when
    the first one's output reservation leaves too little room for the second's."""
    out = 2000
    reqs = [
        Request(id=i, arrival_s=0.001 * i, input_tokens=512, output_tokens=out,
                block_hashes=(10 * i,))
        for i in range(2)
    ]  # fmt: skip
    blocks = (512 * 2 + out + 256) // 16  # both prompts fit, and either request alone
    seq: dict[str, list[int]] = {}
    for backend in ("vllm", "sglang"):
        res = _sim(_cfg(backend, block_size=16), reqs, blocks).run()
        seq[backend] = list(res.records.first_token_us)
    assert seq["vllm"][1] < seq["vllm"][0] + 100_000  # vLLM admits the second at once
    # the second needs its prompt and output, the first's output is reserved at 0.7
    assert 512 + min(out, CLIP_MAX_NEW_TOKENS) + 0.7 * out > blocks * 16 - 512
    assert seq["sglang"][1] > seq["sglang"][0] + 10 * 5000  # SGLang waits for decode progress


@pytest.mark.parametrize(
    ("interval", "osl", "ttft_us"),
    [(1, 50, 1500), (3, 50, 2500), (5, 50, 4500), (30, 3, 1500)],
)
@pytest.mark.parametrize("ff", [True, False])
def test_sglang_receives_new_requests_every_interval_decode_steps(
    interval: int, osl: int, ttft_us: int, ff: bool
) -> None:
    # Every step takes 1 ms. A arrives at 0 on an idle engine (received at once): its
    # prefill runs [0, 1] ms, then decode steps end at 2, 3, 4, ... ms. The prefill step
    # makes the next iteration receive (counter reset to 0 at 1 ms); each decode step adds
    # 1. B arrives at 2.5 ms (during the second decode step): it is received at the first
    # boundary where the counter reaches the interval (3, 4, 6 ms for 1, 3, 5), and
    # prefilled alone in the next 1 ms. With A done at 3 ms (3 tokens) the engine has
    # nothing to run and receives at once, whatever the interval.
    cfg = _cfg("sglang", scheduler_recv_interval=interval)
    assert _second_ttft_us(cfg, osl, ff) == ttft_us


def _second_ttft_us(cfg: DeploymentConfig, osl: int, ff: bool) -> int:
    """B's TTFT when A (100 tokens, ``osl`` out) starts at 0 and B (100, 2) comes at 2.5 ms.

    Every step takes 1 ms; A's prefill step ends at 1 ms.
    """
    timing = LinearStepTime(base_us=1000.0, per_token_us=0.0, per_kv_token_us=0.0,
                            per_seq_us=0.0)  # fmt: skip
    a = Request(id=0, arrival_s=0.0, input_tokens=100, output_tokens=osl)
    b = Request(id=1, arrival_s=0.0025, input_tokens=100, output_tokens=2)
    perf = DeploymentPerf(timing, 10_000, gpu_hour_usd=1.0)
    sim = Simulation(cfg, [a, b], perf=perf, fast_forward=ff)
    rec = sim.run().records
    assert_workers_empty(sim)
    assert rec.first_token_us[0] == 1000
    return int(rec.first_token_us[1] - rec.arrival_us[1])


@pytest.mark.parametrize(
    ("iters", "ratio", "osl", "ttft_us"),
    [(20, 0.9, 100, 21500), (3, 0.9, 100, 4500), (20, 0.9, 5, 3500), (20, 0.04, 100, 1500),
     (None, None, 100, 1500)],
)  # fmt: skip
@pytest.mark.parametrize("ff", [True, False])
def test_trtllm_batch_waiting_holds_new_contexts_while_generation_runs(
    iters: int | None, ratio: float | None, osl: int, ttft_us: int, ff: bool
) -> None:
    # Every step takes 1 ms. A's prefill runs [0, 1] ms (no generation request: no wait), its
    # decode steps end at 2, 3, 4, ... ms. B (100 tokens) arrives at 2.5 ms and is scheduled
    # from the boundary at 3 ms: 100 + 1 tokens < 0.9 x 2048, so it waits, the counter growing
    # by one a boundary (1 at 3 ms, ..., T at 3 + T - 1 ms); at 3 + T ms the counter has
    # reached T and B's prefill runs with A's decode, its first token at 4 + T ms: TTFT
    # 1.5 + T ms. With A done at 5 ms (5 tokens) there is no generation request left and B
    # runs at once (TTFT 3.5 ms); with 101 tokens >= 0.04 x 2048 it never waits (1.5 ms).
    cfg = _cfg("trtllm", batch_wait_timeout_iters=iters, batch_wait_max_tokens_ratio=ratio)
    assert _second_ttft_us(cfg, osl, ff) == ttft_us


def test_batch_waiting_is_trtllm_only() -> None:
    with pytest.raises(ConfigError, match=r"engine.batch_wait_timeout_iters: got 20; allowed: "
                       r"only with backend: trtllm \(this is vllm\)"):  # fmt: skip
        _cfg("vllm", batch_wait_timeout_iters=20)
    with pytest.raises(ConfigError, match=r"engine\.batch_wait_max_tokens_ratio: got 1\.5"):
        _cfg("trtllm", batch_wait_max_tokens_ratio=1.5)


def test_sglang_lpm_serves_the_cached_prefix_first() -> None:
    shared = tuple(range(100, 108))  # 8 units = 4096 tokens
    warm = Request(id=0, arrival_s=0.0, input_tokens=8 * HASH_BLOCK_TOKENS + 10,
                   output_tokens=1, block_hashes=shared)  # fmt: skip
    blockers = [
        Request(id=i, arrival_s=0.2, input_tokens=64, output_tokens=60 * i, block_hashes=(900 + i,))
        for i in (1, 2)
    ]  # both slots busy while the next two arrive; one frees first
    cold = Request(id=3, arrival_s=0.21, input_tokens=8 * HASH_BLOCK_TOKENS + 10,
                   output_tokens=5, block_hashes=tuple(range(500, 508)))  # fmt: skip
    hot = Request(id=4, arrival_s=0.22, input_tokens=8 * HASH_BLOCK_TOKENS + 10,
                  output_tokens=5, block_hashes=shared)  # fmt: skip
    reqs = [warm, *blockers, cold, hot]
    first = {}
    for policy in ("fcfs", "lpm"):
        cfg = _cfg("sglang", schedule_policy=policy, max_num_seqs=2, block_size=16)
        res = _sim(cfg, reqs, 100_000).run()
        first[policy] = list(res.records.first_token_us)
    assert first["fcfs"][3] < first["fcfs"][4]  # arrival order
    assert first["lpm"][4] < first["lpm"][3]  # the cached prompt jumps the queue


# ----------------------------------------------------------------------------- TRT-LLM
def test_trtllm_guaranteed_no_evict_never_preempts() -> None:
    reqs = make_requests(80, rate_rps=1000, seed=2, input_range=(50, 400), output_range=(100, 500))
    preempted = {}
    for backend, policy in (
        ("trtllm", "GUARANTEED_NO_EVICT"),
        ("trtllm", "MAX_UTILIZATION"),
        ("vllm", None),
    ):
        engine = {"block_size": 16} | ({"capacity_scheduler_policy": policy} if policy else {})
        sim = _sim(_cfg(backend, **engine), reqs, 200)
        res = sim.run()
        assert res.metrics.completed_requests == len(reqs)
        assert_workers_empty(sim)
        preempted[policy] = int(np.sum(res.records.preemptions))
    assert preempted["GUARANTEED_NO_EVICT"] == 0
    assert preempted["MAX_UTILIZATION"] > 0
    assert preempted[None] > 0


def test_trtllm_reservation_lowers_concurrency() -> None:
    """GUARANTEED_NO_EVICT holds whole outputs, so fewer requests decode at once than when
    packing (which pays for it in recomputation)."""
    reqs = make_requests(100, rate_rps=1000, seed=4, input_range=(50, 300), output_range=(300, 600))
    batch = {}
    for policy in ("GUARANTEED_NO_EVICT", "MAX_UTILIZATION"):
        timing = RecordingStepTime()
        cfg = _cfg("trtllm", block_size=16, capacity_scheduler_policy=policy)
        res = _sim(cfg, reqs, 600, timing).run()
        assert res.metrics.completed_requests == len(reqs)
        batch[policy] = max(d for _, d in timing.shapes)
        # a reserving request can always finish: at most the pool's worth of whole sequences
    assert batch["GUARANTEED_NO_EVICT"] < batch["MAX_UTILIZATION"]


# -------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("backend", "engine", "field"),
    [
        ("vllm", {"enable_mixed_chunk": True}, "engine.enable_mixed_chunk"),
        ("trtllm", {"schedule_policy": "lpm"}, "engine.schedule_policy"),
        ("sglang", {"capacity_scheduler_policy": "MAX_UTILIZATION"},
         "engine.capacity_scheduler_policy"),
        ("vllm", {"block_size": 1}, "engine.block_size"),
        ("sglang", {"schedule_policy": "lifo"}, "engine.schedule_policy"),
        ("sglang", {"schedule_conservativeness": -1}, "engine.schedule_conservativeness"),
    ],
)  # fmt: skip
def test_backend_knobs_are_validated_per_backend(
    backend: str, engine: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _cfg(backend, **engine)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_pool_engines_are_validated_too() -> None:
    with pytest.raises(ConfigError) as err:
        DeploymentConfig.from_dict(
            {"model": "x", "gpu": "h200_sxm", "backend": "vllm", "mode": "disagg",
             "prefill": {"engine": {"enable_mixed_chunk": True}}, "decode": {}}
        )  # fmt: skip
    assert err.value.field == "prefill.engine.enable_mixed_chunk"


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_a_transferred_request_decodes_where_the_backend_takes_it_straight_to_decoding(
    backend: str,
) -> None:
    # vLLM's decode worker computes the prompt's last token (a one-token prefill chunk);
    # SGLang's and TensorRT-LLM's decode servers take the request into decoding at once: their
    # decode pool never prices a prefill chunk (the request's first step is a decode of its
    # whole prompt).
    cfg = DeploymentConfig.from_dict(
        {"model": "x", "gpu": "h200_sxm", "backend": backend, "mode": "disagg",
         "prefill": {"workers": 1}, "decode": {"workers": 1},
         "engine": {"max_num_seqs": 8, "max_num_batched_tokens": 4096}}
    )  # fmt: skip
    decode = RecordingStepTime()
    perf = {
        "prefill": DeploymentPerf(LinearStepTime(), 10_000, gpu_hour_usd=1.0),
        "decode": DeploymentPerf(decode, 10_000, gpu_hour_usd=1.0),  # type: ignore[arg-type]
    }
    reqs = make_requests(20, rate_rps=50, seed=1, input_range=(100, 2000), output_range=(2, 50))
    sim = Simulation(cfg, reqs, perf=perf)
    assert sim.run().metrics.completed_requests == 20
    assert_workers_empty(sim)
    chunks = sum(p for p, _ in decode.shapes)
    assert (chunks > 0) == (backend == "vllm")
