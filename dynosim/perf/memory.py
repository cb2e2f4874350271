"""KV-cache memory sizing: how many KV blocks one engine (a TP group of GPUs) has.

Everything is per GPU (one TP rank); a TP group of ``tp`` GPUs holds ``tp`` shards of every KV
token, so the engine's token capacity equals one rank's.

Formulas (bytes, per GPU):

* weights = (decoder-layer params x bytes per weight + embedding/LM-head params x 2) / tp,
  where bytes per weight is 2 for bf16 and 1 for fp8 (embeddings stay bf16, as in
  AIConfigurator's memory model);
* KV per token = 2 (K and V) x layers x ceil(kv_heads / tp) x head_dim x bytes per KV element
  (2 for bf16, 1 for fp8 — an fp8 deployment also stores its KV cache in fp8). When
  ``tp > kv_heads`` each KV head is replicated, so every rank still holds one head;
* activations = 2 x max_num_batched_tokens x (heads x head_dim) x c(tp), at least 70 MiB, with
  c = 10, 6, 5, 5 for tp = 1, 2, 4, >= 8 (AIConfigurator's default activation coefficients:
  the peak of one forward pass over a full chunk, proportional to ``max_num_batched_tokens``);
* reserved = 1 GiB runtime (CUDA context, CUDA graphs, allocator slack) + 384 MiB of NCCL
  buffers when tp > 1;
* KV pool = memory x gpu_memory_utilization - weights - activations - reserved, rounded down
  to whole blocks of ``engine.block_size`` tokens.

A deployment is infeasible when the pool cannot hold one full scheduling chunk, i.e. fewer than
``ceil(max_num_batched_tokens / block_size)`` blocks: the engine could then never run the step
its own token budget allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, InfeasibleError
from dynosim.perf.catalog import GpuSpec, ModelSpec, gpu_spec, model_spec

MIB = 1 << 20
GIB = 1 << 30
RUNTIME_RESERVED_BYTES = GIB
NCCL_RESERVED_BYTES = 384 * MIB
MIN_ACTIVATION_BYTES = 70 * MIB
_ACTIVATION_COEFF = {1: 10, 2: 6, 4: 5}


@dataclass(frozen=True, slots=True, kw_only=True)
class KVPool:
    """Memory budget of one GPU of an engine and the KV pool that results.

    Attributes:
        weights_bytes_per_gpu: Model weights held by one TP rank.
        kv_bytes_per_token: KV-cache bytes one token occupies on one rank.
        activation_bytes: Peak activation memory of one forward pass.
        reserved_bytes: Runtime and communication buffers.
        kv_budget_bytes: Bytes left for the KV cache (before rounding to blocks).
        block_size: Tokens per KV block.
        total_kv_blocks: KV blocks the engine has.
        kv_tokens: Tokens those blocks hold (``total_kv_blocks * block_size``).
    """

    weights_bytes_per_gpu: int
    kv_bytes_per_token: int
    activation_bytes: int
    reserved_bytes: int
    kv_budget_bytes: int
    block_size: int
    total_kv_blocks: int
    kv_tokens: int


def weight_bytes(model: ModelSpec, dtype: str) -> int:
    """Bytes of all weights of ``model`` in ``dtype`` (embeddings and LM head in bf16)."""
    per_weight = 1 if dtype == "fp8" else 2
    return model.layer_params * per_weight + (model.embedding_params + model.hidden) * 2


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads one TP rank stores (heads are replicated when ``tp > kv_heads``)."""
    return max(1, math.ceil(model.kv_heads / tp))


def kv_bytes_per_token(model: ModelSpec, tp: int, dtype: str) -> int:
    """KV-cache bytes one token occupies on one TP rank."""
    per_elem = 1 if dtype == "fp8" else 2
    return 2 * model.layers * kv_heads_per_gpu(model, tp) * model.head_dim * per_elem


def activation_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int) -> int:
    """Peak activation bytes of one forward pass over ``max_num_batched_tokens`` tokens."""
    coeff = _ACTIVATION_COEFF.get(tp, 5)
    raw = 2 * max_num_batched_tokens * model.heads * model.head_dim * coeff
    return max(raw, MIN_ACTIVATION_BYTES)


def _pool(config: DeploymentConfig, model: ModelSpec, gpu: GpuSpec) -> KVPool:
    eng = config.engine
    weights = math.ceil(weight_bytes(model, config.dtype) / config.tp)
    per_token = kv_bytes_per_token(model, config.tp, config.dtype)
    act = activation_bytes(model, config.tp, eng.max_num_batched_tokens)
    reserved = RUNTIME_RESERVED_BYTES + (NCCL_RESERVED_BYTES if config.tp > 1 else 0)
    usable = math.floor(gpu.memory_bytes * eng.gpu_memory_utilization)
    budget = usable - weights - act - reserved
    block_bytes = per_token * eng.block_size
    blocks = max(0, budget // block_bytes)
    needed_blocks = math.ceil(eng.max_num_batched_tokens / eng.block_size)
    if blocks < needed_blocks:
        missing = needed_blocks * block_bytes - budget
        raise InfeasibleError(
            f"{config.model} does not fit on {config.gpu} with tp={config.tp} ({config.dtype}): "
            f"{missing / GIB:.2f} GiB ({missing} bytes) short of a KV pool for one "
            f"{eng.max_num_batched_tokens}-token chunk (weights {weights / GIB:.1f} GiB/GPU, "
            f"usable {usable / GIB:.1f} GiB/GPU)"
        )
    return KVPool(
        weights_bytes_per_gpu=weights,
        kv_bytes_per_token=per_token,
        activation_bytes=act,
        reserved_bytes=reserved,
        kv_budget_bytes=budget,
        block_size=eng.block_size,
        total_kv_blocks=blocks,
        kv_tokens=blocks * eng.block_size,
    )


def check_feasible(config: DeploymentConfig) -> KVPool:
    """Check that ``config`` can run, and return its KV pool.

    Raises:
        ConfigError: unknown model or GPU, fp8 on a GPU without FP8, or a TP degree that does
            not divide the attention heads.
        InfeasibleError: the model does not fit in the GPUs' memory.
    """
    model = model_spec(config.model)
    gpu = gpu_spec(config.gpu)
    gpu.flops(config.dtype)
    if model.heads % config.tp:
        raise ConfigError(
            "tp", config.tp, f"a divisor of the {model.heads} attention heads of {model.name}"
        )
    return _pool(config, model, gpu)


def kv_pool(config: DeploymentConfig) -> KVPool:
    """KV pool of one engine of ``config`` (see the module docstring for the formula).

    Raises:
        ConfigError: as :func:`check_feasible`.
        InfeasibleError: the pool cannot hold one ``max_num_batched_tokens`` chunk.
    """
    return check_feasible(config)
