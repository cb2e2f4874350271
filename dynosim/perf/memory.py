"""KV-cache memory sizing: how many KV blocks one engine (one scheduler's GPUs) has.

Everything is per GPU. An engine replica has ``tp x attention_dp`` GPUs; with attention data
parallelism (``attention_dp = d > 1``) it runs ``d`` schedulers (DP ranks) of ``tp`` GPUs each,
every rank holding its own KV cache, and the MoE layers spread over all ``tp x d`` GPUs as
``moe_tp x ep``. A rank of ``tp`` GPUs holds ``tp`` shards of every KV token, so the rank's
token capacity equals one GPU's.

Formulas (bytes, per GPU):

* weights = attention/dense/shared-expert params x bytes per weight / tp
  + routed-expert params x bytes per expert weight / (ep x moe_tp)
  + embedding/LM-head params x 2 / tp (embeddings stay bf16, as in AIConfigurator's memory
  model). Bytes per weight: bf16 2, fp8 and fp8_block 1, nvfp4 9/16 (one FP8 scale per 16
  FP4 weights), mxfp4 and int4_wo experts 0.5 with bf16 for the rest (AIConfigurator's
  ``QuantMapping`` memory figures in ``sdk/common.py``);
* KV per token = full-attention layers x (2 x ceil(kv_heads / tp) x head_dim) x bytes per KV
  element (2 for bf16, 1 for fp8: ``kv_dtype``). When ``tp > kv_heads`` each KV head is
  replicated, so every rank still holds one head. Multi-head latent attention (DeepSeek,
  Kimi-K2, GLM-5) stores ``kv_lora_rank + qk_rope_head_dim`` elements per token and layer,
  the same on every TP rank (not per head);
* per-request state, reserved for ``max_num_seqs`` requests: the KV of the sliding-window
  layers (``sliding_window`` tokens each, gpt-oss) and the Gated DeltaNet state of the
  linear-attention layers (Qwen3.5: the recurrent state in fp32, the conv window in bf16,
  heads sharded by tp), as vLLM's hybrid allocator and SGLang's mamba pool size them;
* activations = 2 x max_num_batched_tokens x (heads x head_dim) x c(tp), at least 70 MiB, with
  c = 10, 6, 5, 5 for tp = 1, 2, 4, >= 8 (AIConfigurator's default activation coefficients:
  the peak of one forward pass over a full chunk, proportional to ``max_num_batched_tokens``);
* reserved = 1 GiB runtime (CUDA context, CUDA graphs, allocator slack) + 384 MiB of NCCL
  buffers when the replica has more than one GPU;
* KV pool, by each engine's own formula, with ``f = engine.gpu_memory_utilization`` read as
  that engine's memory flag (the exporter writes it as such), rounded down to whole blocks of
  ``engine.block_size`` tokens:

  - vLLM (``--gpu-memory-utilization``): ``f x memory - weights - activations - reserved -
    state``. ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``:
    ``requested_memory (= total x gpu_memory_utilization) - non_kv_cache_memory`` (weights +
    the torch peak of a profile run over ``max_num_batched_tokens`` + non-torch memory), the
    CUDA-graph estimate subtracted only under ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
    (here inside ``reserved``);
  - SGLang (``--mem-fraction-static``): ``f x (memory - reserved) - weights - state``.
    ``sglang/srt/model_executor/model_runner.py`` ``profile_max_num_token``: ``rest_memory =
    available_gpu_memory - total_gpu_memory x (1 - mem_fraction_static)``, where
    ``total_gpu_memory`` is the free memory after the CUDA context and NCCL are up and
    ``available_gpu_memory`` that minus the weights; activations and CUDA graphs live in the
    ``1 - f`` left over, so they are not subtracted;
  - TRT-LLM (``kv_cache_config.free_gpu_memory_fraction``, default 0.9): ``f x (memory -
    weights - activations - reserved) - state``. ``tensorrt_llm/_torch/pyexecutor/_util.py``
    ``KvCacheCreator._cal_max_memory``: ``available_kv_mem = (total_gpu_memory - peak_memory +
    allocated_bytes) x fraction``, ``peak_memory`` the torch + non-torch peak of a profiling
    forward over ``max_num_tokens`` (weights, activations, runtime).

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


# Bytes per weight of the GEMMs and of the routed experts for each dtype (AIConfigurator's
# QuantMapping memory figures: sdk/common.py GEMMQuantMode / MoEQuantMode).
_GEMM_BYTES = {
    "bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 9 / 16, "mxfp4": 2.0, "int4_wo": 2.0
}  # fmt: skip
EXPERT_BYTES = {
    "bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "nvfp4": 9 / 16, "mxfp4": 0.5, "int4_wo": 0.5
}  # fmt: skip
_KV_ELEM_BYTES = {"bf16": 2, "fp8": 1}
_LINEAR_STATE_BYTES = 4  # Gated DeltaNet recurrent state in fp32 (Qwen3.5 mamba_ssm_dtype)


def _kv_elem(dtype: str) -> int:
    """Bytes of one KV element for a KV dtype, or the KV default of a weight dtype."""
    if dtype in _KV_ELEM_BYTES:
        return _KV_ELEM_BYTES[dtype]
    return 1 if dtype in ("fp8_block", "nvfp4") else 2


def weight_bytes(model: ModelSpec, dtype: str) -> int:
    """Bytes of all weights of ``model`` in ``dtype`` (embeddings and LM head in bf16)."""
    return weight_bytes_per_gpu(model, dtype, tp=1, ep=1, moe_tp=1)


def weight_bytes_per_gpu(model: ModelSpec, dtype: str, *, tp: int, ep: int, moe_tp: int) -> int:
    """Weight bytes one GPU holds: experts over ``ep x moe_tp``, the rest over ``tp``."""
    experts = model.expert_params
    dense = (model.layer_params - experts) * _GEMM_BYTES[dtype]
    embed = (model.embedding_params + model.hidden) * 2
    return math.ceil((dense + embed) / tp + experts * EXPERT_BYTES[dtype] / (ep * moe_tp))


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads one TP rank stores (heads are replicated when ``tp > kv_heads``)."""
    return max(1, math.ceil(model.kv_heads / tp))


def _kv_elements_per_layer(model: ModelSpec, tp: int) -> int:
    if model.is_mla:
        return model.kv_elements_per_token_per_layer
    return 2 * kv_heads_per_gpu(model, tp) * model.head_dim


def kv_bytes_per_token(model: ModelSpec, tp: int, dtype: str) -> int:
    """KV-cache bytes one token occupies on one TP rank (``dtype``: the KV element type).

    Only the layers whose cache grows with the context count: sliding-window and linear
    attention layers hold a fixed per-request state instead (:func:`state_bytes_per_request`).
    """
    layers = model.full_attention_layers - model.sliding_layers
    return layers * _kv_elements_per_layer(model, tp) * _kv_elem(dtype)


def state_bytes_per_request(model: ModelSpec, tp: int, kv_dtype: str) -> int:
    """Fixed cache one running request holds on one TP rank (sliding windows, linear state)."""
    window = model.sliding_layers * model.sliding_window * _kv_elements_per_layer(model, tp)
    window *= _kv_elem(kv_dtype)
    linear = 0
    if model.linear_layers:
        key = model.linear_key_heads * model.linear_key_dim
        value = model.linear_value_heads * model.linear_value_dim
        conv = (2 * key + value) * (model.linear_conv_kernel - 1) * 2
        recurrent = model.linear_value_heads * model.linear_key_dim * model.linear_value_dim
        linear = model.linear_layers * (conv + recurrent * _LINEAR_STATE_BYTES)
        linear = math.ceil(linear / tp)
    return window + linear


def activation_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int) -> int:
    """Peak activation bytes of one forward pass over ``max_num_batched_tokens`` tokens."""
    coeff = _ACTIVATION_COEFF.get(tp, 5)
    raw = 2 * max_num_batched_tokens * model.heads * model.head_dim * coeff
    return max(raw, MIN_ACTIVATION_BYTES)


def kv_budget_bytes(
    backend: str, memory: int, fraction: float, *, weights: int, activations: int, reserved: int
) -> int:
    """Bytes one GPU gives its KV cache by ``backend``'s own formula (module docstring).

    ``fraction`` is the engine's memory flag (vLLM ``gpu_memory_utilization``, SGLang
    ``mem_fraction_static``, TRT-LLM ``free_gpu_memory_fraction``); ``reserved`` the runtime
    (CUDA context, NCCL, graphs). Per-request state is not included.
    """
    if backend == "sglang":
        return math.floor((memory - reserved) * fraction) - weights
    if backend == "trtllm":
        return math.floor((memory - weights - activations - reserved) * fraction)
    return math.floor(memory * fraction) - weights - activations - reserved


def _pool(config: DeploymentConfig, model: ModelSpec, gpu: GpuSpec) -> KVPool:
    eng = config.engine
    moe_tp = config.moe_tp_size if model.is_moe else 1
    weights = weight_bytes_per_gpu(model, config.dtype, tp=config.tp, ep=config.ep, moe_tp=moe_tp)
    draft = draft_weight_bytes_per_gpu(config)
    weights += draft
    per_token = kv_bytes_per_token(model, config.tp, config.kv_dtype)
    state = eng.max_num_seqs * state_bytes_per_request(model, config.tp, config.kv_dtype)
    act = activation_bytes(model, config.tp, eng.max_num_batched_tokens)
    multi_gpu = config.tp * config.attention_dp > 1
    runtime = RUNTIME_RESERVED_BYTES + (NCCL_RESERVED_BYTES if multi_gpu else 0)
    reserved = runtime + state
    fraction = eng.gpu_memory_utilization
    budget = kv_budget_bytes(
        config.backend, gpu.memory_bytes, fraction, weights=weights, activations=act,
        reserved=runtime,
    ) - state  # fmt: skip
    usable = math.floor(gpu.memory_bytes * fraction)
    block_bytes = per_token * eng.block_size
    blocks = max(0, budget // block_bytes)
    needed_blocks = math.ceil(eng.max_num_batched_tokens / eng.block_size)
    if blocks < needed_blocks:
        missing = needed_blocks * block_bytes - budget
        shape = f"tp={config.tp}"
        if config.ep > 1 or config.attention_dp > 1:
            shape += f" ep={config.ep} attention_dp={config.attention_dp}"
        raise InfeasibleError(
            f"{config.model} does not fit on {config.gpu} with {shape} ({config.dtype}): "
            f"{missing / GIB:.2f} GiB ({missing} bytes) short of a KV pool for one "
            f"{eng.max_num_batched_tokens}-token chunk (weights {weights / GIB:.1f} GiB/GPU"
            + (f" with the draft model's {draft / GIB:.1f}" if draft else "")
            + f", usable {usable / GIB:.1f} GiB/GPU)"
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


def draft_weight_bytes_per_gpu(config: DeploymentConfig) -> int:
    """The weights a speculative draft model (``speculative.method: draft``) adds to each GPU.

    vLLM loads the draft model on the target's GPUs, sharded with the target's tensor
    parallelism by default (``SpeculativeConfig.draft_tensor_parallel_size``: 1 or the
    target's). Its own KV cache (the draft's layers, per token) is not counted: an
    approximation that overstates the KV pool by the draft's share of it.
    """
    spec = config.speculative
    if spec is None or spec.draft_model is None or spec.num_speculative_tokens == 0:
        return 0
    draft = model_spec(spec.draft_model)
    moe_tp = config.tp if draft.is_moe else 1
    return weight_bytes_per_gpu(draft, config.dtype, tp=config.tp, ep=1, moe_tp=moe_tp)


def check_feasible(config: DeploymentConfig) -> KVPool:
    """Check that ``config`` can run, and return its KV pool.

    Raises:
        ConfigError: unknown model or GPU, a dtype (or MXFP8 MoE activations) the GPU has no
            tensor cores for, a TP degree
            that does not divide the attention heads, or an expert-parallel shape the model
            cannot take (:func:`check_parallel`).
        InfeasibleError: the model does not fit in the GPUs' memory.
    """
    model = model_spec(config.model)
    gpu = gpu_spec(config.gpu)
    gpu.flops(config.dtype)
    gpu.check_moe_activation(config.moe_activation)
    if model.heads % config.tp:
        raise ConfigError(
            "tp", config.tp, f"a divisor of the {model.heads} attention heads of {model.name}"
        )
    check_parallel(config, model)
    return _pool(config, model, gpu)


def check_parallel(config: DeploymentConfig, model: ModelSpec) -> None:
    """Check the expert-parallel shape against the model.

    Raises:
        ConfigError: ``ep`` or ``moe_tp`` on a dense model, ``ep`` not dividing the experts,
            ``moe_tp`` not dividing the expert's intermediate size, or mxfp4 on a model without
            experts.
    """
    if not model.is_moe:
        if config.ep > 1:
            raise ConfigError("ep", config.ep, f"1 ({model.name} is dense: no experts)")
        if config.moe_tp is not None and config.moe_tp != config.tp * config.attention_dp:
            raise ConfigError("moe_tp", config.moe_tp, f"unset ({model.name} is dense)")
        if config.dtype in ("mxfp4", "int4_wo"):
            why = f"{model.name} is dense; {config.dtype} is for MoE experts"
            raise ConfigError("dtype", config.dtype, f"bf16 | fp8 | fp8_block | nvfp4 ({why})")
        return
    if model.experts % config.ep:
        raise ConfigError(
            "ep", config.ep, f"a divisor of the {model.experts} experts of {model.name}"
        )
    if model.moe_intermediate % config.moe_tp_size:
        raise ConfigError(
            "moe_tp", config.moe_tp_size, f"a divisor of the expert intermediate size "
            f"{model.moe_intermediate} of {model.name}"
        )  # fmt: skip


def kv_pool(config: DeploymentConfig) -> KVPool:
    """KV pool of one engine of ``config`` (see the module docstring for the formula).

    Raises:
        ConfigError: as :func:`check_feasible`.
        InfeasibleError: the pool cannot hold one ``max_num_batched_tokens`` chunk.
    """
    return check_feasible(config)
