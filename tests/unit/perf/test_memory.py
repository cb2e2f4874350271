"""KV pool sizing and feasibility checks."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from dynosim.config import DeploymentConfig, EngineConfig
from dynosim.errors import ConfigError, InfeasibleError
from dynosim.perf.catalog import model_spec
from dynosim.perf.memory import check_feasible, kv_bytes_per_token, kv_pool

GIB = 1 << 30


def cfg(
    model: str = "meta-llama/Meta-Llama-3.1-8B", gpu: str = "h100_sxm", **kw: object
) -> DeploymentConfig:
    return DeploymentConfig(model=model, gpu=gpu, **kw)  # type: ignore[arg-type]


def test_llama8b_h100_pool() -> None:
    pool = kv_pool(cfg())
    assert pool.weights_bytes_per_gpu == 16_060_522_496
    assert pool.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # 128 KiB
    assert pool.kv_tokens == pool.total_kv_blocks * 64
    assert 400_000 < pool.kv_tokens < 480_000
    usable = int(80 * GIB * 0.9)
    left = usable - pool.weights_bytes_per_gpu - pool.activation_bytes - pool.reserved_bytes
    assert left - pool.kv_tokens * pool.kv_bytes_per_token < 64 * pool.kv_bytes_per_token


def test_tp_shards_weights_and_kv() -> None:
    one, two = kv_pool(cfg(tp=1)), kv_pool(cfg(tp=2))
    assert two.weights_bytes_per_gpu == pytest.approx(one.weights_bytes_per_gpu / 2, abs=1)
    assert two.kv_bytes_per_token * 2 == one.kv_bytes_per_token
    assert two.kv_tokens > 2 * one.kv_tokens


def test_kv_heads_replicated_beyond_kv_heads() -> None:
    m = model_spec("meta-llama/Meta-Llama-3.1-8B")  # 8 KV heads
    assert kv_bytes_per_token(m, 8, "bf16") == kv_bytes_per_token(m, 16, "bf16")
    assert kv_bytes_per_token(m, 8, "bf16") == 2 * 32 * 1 * 128 * 2


def test_fp8_halves_weights_and_kv() -> None:
    bf, f8 = kv_pool(cfg("Qwen/Qwen3-32B", tp=2)), kv_pool(cfg("Qwen/Qwen3-32B", tp=2, dtype="fp8"))
    assert f8.kv_bytes_per_token * 2 == bf.kv_bytes_per_token
    assert f8.weights_bytes_per_gpu < 0.6 * bf.weights_bytes_per_gpu


def test_activation_grows_with_batched_tokens() -> None:
    small = kv_pool(cfg(engine=EngineConfig(max_num_batched_tokens=2048)))
    large = kv_pool(cfg(engine=EngineConfig(max_num_batched_tokens=32768)))
    assert large.activation_bytes > small.activation_bytes
    assert large.kv_tokens < small.kv_tokens


def test_utilization_scales_pool() -> None:
    lo = kv_pool(cfg(engine=EngineConfig(gpu_memory_utilization=0.5)))
    hi = kv_pool(cfg(engine=EngineConfig(gpu_memory_utilization=0.95)))
    assert hi.kv_tokens > lo.kv_tokens


def test_too_large_is_infeasible() -> None:
    with pytest.raises(InfeasibleError) as err:
        kv_pool(cfg("meta-llama/Meta-Llama-3.1-70B", tp=1))
    msg = str(err.value)
    for part in ("Meta-Llama-3.1-70B", "h100_sxm", "tp=1", "bytes"):
        assert part in msg
    assert "\n" not in msg
    assert kv_pool(cfg("meta-llama/Meta-Llama-3.1-70B", tp=2)).total_kv_blocks > 0


def test_needs_one_chunk_of_blocks() -> None:
    # Llama-8B bf16 on L40S at low utilisation leaves too little for a 64k-token chunk.
    tight = cfg(gpu="l40s", engine=EngineConfig(gpu_memory_utilization=0.5))
    kv_pool(tight)
    with pytest.raises(InfeasibleError):
        kv_pool(
            replace(
                tight, engine=EngineConfig(gpu_memory_utilization=0.5, max_num_batched_tokens=65536)
            )
        )


def test_tp_must_divide_heads() -> None:
    with pytest.raises(ConfigError, match="32 attention heads") as err:
        check_feasible(cfg("Qwen/Qwen3-8B", tp=64))
    assert err.value.field == "tp"


def test_unknown_names() -> None:
    with pytest.raises(ConfigError, match="model"):
        check_feasible(cfg("x/y"))
    with pytest.raises(ConfigError, match="gpu"):
        check_feasible(cfg(gpu="tpu"))
    with pytest.raises(ConfigError, match="dtype"):
        check_feasible(cfg(gpu="a100_sxm", dtype="fp8"))


@pytest.mark.parametrize(
    ("model", "tp", "dtype", "backend"),
    [
        ("meta-llama/Meta-Llama-3.1-8B", 1, "bf16", "vllm"),
        ("Qwen/Qwen3-32B", 2, "fp8", "vllm"),
        ("meta-llama/Meta-Llama-3.1-70B", 4, "bf16", "sglang"),
        ("Qwen/Qwen3-8B", 1, "bf16", "sglang"),
    ],
)
def test_cross_check_aiconfigurator(model: str, tp: int, dtype: str, backend: str) -> None:
    from aiconfigurator_core.sdk import perf_database
    from aiconfigurator_core.sdk.memory import estimate_kv_cache

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    quant = "fp8" if dtype == "fp8" else "bfloat16"
    ref = estimate_kv_cache(
        model,
        "h100_sxm",
        backend,
        perf_database.resolve_query_version("h100_sxm", backend, "current"),
        max_num_tokens=8192,
        max_batch_size=256,
        memory_fraction_kind="of_total",
        memory_fraction_value=0.9,
        tp_size=tp,
        gemm_quant_mode=quant,
        kvcache_quant_mode=quant,
    )
    pool = kv_pool(cfg(model, tp=tp, dtype=dtype, backend=backend))
    assert pool.weights_bytes_per_gpu == pytest.approx(
        ref["memory_breakdown"]["weights_bytes"], rel=0.01
    )
    assert pool.kv_bytes_per_token == ref["kv_size_per_token_bytes"]
    # We reserve less runtime memory than AIC's conservative 3.5 GiB.
    assert pool.kv_tokens == pytest.approx(ref["total_kv_size_tokens"], rel=0.15)


def test_each_backend_sizes_its_pool_by_its_own_formula() -> None:
    """Llama-3.1-8B bf16 on one H100 (80 GiB), fraction 0.9, 8192-token chunks, hand-computed.

    weights W = 16,060,522,496 B; activations A = 2 x 8192 x (32 x 128) x 10 = 671,088,640 B
    (tp 1 coefficient 10); runtime R = 1 GiB (one GPU: no NCCL); 131,072 B of KV per token.
    vLLM (gpu_worker.determine_available_memory): 0.9 x 80 GiB - W - A - R;
    SGLang (model_runner.profile_max_num_token): 0.9 x (80 GiB - R) - W;
    TRT-LLM (KvCacheCreator._cal_max_memory): 0.9 x (80 GiB - W - A - R).
    """
    w, a, r, total = 16_060_522_496, 671_088_640, GIB, 80 * GIB
    want = {
        "vllm": int(total * 0.9) - w - a - r,  # 77,309,411,328 - W - A - R
        "sglang": int((total - r) * 0.9) - w,  # 0.9 x 84,825,604,096 - W
        "trtllm": int((total - w - a - r) * 0.9),  # 0.9 x 68,093,992,960
    }
    assert want == {"vllm": 59_504_058_368, "sglang": 60_282_521_190, "trtllm": 61_284_593_664}
    for backend, budget in want.items():
        pool = kv_pool(cfg(backend=backend))
        assert (pool.weights_bytes_per_gpu, pool.activation_bytes) == (w, a)
        assert pool.kv_budget_bytes == budget
        assert pool.total_kv_blocks == budget // (131_072 * 64)
