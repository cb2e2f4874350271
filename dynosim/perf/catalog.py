"""Hardware and model catalog: the numbers the memory and roofline models are built from.

GPU names follow NVIDIA AIConfigurator's system names (``h100_sxm``, ``h200_sxm``, ...); their
memory, FLOP/s and bandwidth figures are the ones in AIConfigurator's ``systems/*.yaml`` (dense
tensor-core throughput, HBM capacity in bytes, one-direction NVLink bandwidth per GPU). Model
names are Hugging Face ids as AIConfigurator spells them; architectures were copied from its
``model_configs/*_config.json``. ``aic_name`` is the id under which AIConfigurator knows the
architecture (fine-tunes such as ``Llama-3.1-8B-Instruct`` share their base model's kernels).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dynosim.errors import ConfigError

GIB = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU type.

    Attributes:
        name: AIConfigurator system name.
        memory_bytes: HBM capacity.
        bf16_flops: Dense BF16 tensor-core FLOP/s.
        fp8_flops: Dense FP8 tensor-core FLOP/s, or None when the GPU has no FP8 units.
        hbm_bytes_per_s: Peak HBM bandwidth.
        nvlink_bytes_per_s: GPU-to-GPU bandwidth per GPU, one direction (PCIe for l40s).
        gpu_hour_usd: Default price of one GPU-hour (rough 2025 cloud on-demand list price).
    """

    name: str
    memory_bytes: int
    bf16_flops: float
    fp8_flops: float | None
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float
    gpu_hour_usd: float

    def flops(self, dtype: str) -> float:
        """Dense FLOP/s for ``dtype`` ("bf16" or "fp8").

        Raises:
            ConfigError: ``dtype`` is fp8 and the GPU has no FP8 tensor cores.
        """
        if dtype == "fp8":
            if self.fp8_flops is None:
                raise ConfigError("dtype", dtype, f"bf16 ({self.name} has no FP8 tensor cores)")
            return self.fp8_flops
        return self.bf16_flops


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One decoder-only transformer architecture.

    Attributes:
        name: Hugging Face id.
        aic_name: The id AIConfigurator models this architecture under, or None if it lacks it.
        layers: Decoder layers.
        hidden: Hidden size.
        heads: Attention (query) heads.
        kv_heads: Key/value heads (GQA groups).
        head_dim: Dimension of one head.
        intermediate: Dense MLP intermediate size (per expert for MoE: ``moe_intermediate``).
        vocab: Vocabulary size.
        tied_embeddings: Whether the LM head shares the embedding matrix.
        experts: Routed experts per MoE layer (0 for a dense model).
        topk: Experts each token is routed to (0 for a dense model).
        moe_intermediate: Intermediate size of one expert.
        qk_norm: Whether each head has RMSNorm on q and k (Qwen3).
    """

    name: str
    aic_name: str | None
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    experts: int = 0
    topk: int = 0
    moe_intermediate: int = 0
    qk_norm: bool = False

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model."""
        return self.experts > 0

    @property
    def attn_params_per_layer(self) -> int:
        """Q, K, V and output projection weights of one layer."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        norms = 2 * self.head_dim if self.qk_norm else 0
        return self.hidden * (q + 2 * kv) + q * self.hidden + norms

    @property
    def mlp_params_per_layer(self) -> int:
        """MLP weights of one layer (all experts and the router for MoE)."""
        if self.is_moe:
            return (
                self.experts * 3 * self.hidden * self.moe_intermediate + self.hidden * self.experts
            )
        return 3 * self.hidden * self.intermediate

    @property
    def active_mlp_params_per_layer(self) -> int:
        """MLP weights one token multiplies through in one layer."""
        if self.is_moe:
            return self.topk * 3 * self.hidden * self.moe_intermediate + self.hidden * self.experts
        return self.mlp_params_per_layer

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (counted once when tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def layer_params(self) -> int:
        """Weights of all decoder layers (projections, MLP/experts, norms)."""
        per_layer = self.attn_params_per_layer + self.mlp_params_per_layer + 2 * self.hidden
        return self.layers * per_layer

    @property
    def total_params(self) -> int:
        """All weights."""
        return self.layer_params + self.embedding_params + self.hidden

    @property
    def active_params(self) -> int:
        """Weights one token multiplies through (the LM head included, the embedding not)."""
        per_layer = self.attn_params_per_layer + self.active_mlp_params_per_layer + 2 * self.hidden
        return self.layers * per_layer + self.vocab * self.hidden


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec(
            name="h100_sxm",
            memory_bytes=80 * GIB,
            bf16_flops=989e12,
            fp8_flops=1978e12,
            hbm_bytes_per_s=3.35e12,
            nvlink_bytes_per_s=450e9,
            gpu_hour_usd=2.99,
        ),
        GpuSpec(
            name="h200_sxm",
            memory_bytes=141 * GIB,
            bf16_flops=989e12,
            fp8_flops=1978e12,
            hbm_bytes_per_s=4.8e12,
            nvlink_bytes_per_s=450e9,
            gpu_hour_usd=3.79,
        ),
        GpuSpec(
            name="b200_sxm",
            memory_bytes=180 * GIB,
            bf16_flops=2250e12,
            fp8_flops=4500e12,
            hbm_bytes_per_s=7.7e12,
            nvlink_bytes_per_s=900e9,
            gpu_hour_usd=5.99,
        ),
        GpuSpec(
            name="a100_sxm",
            memory_bytes=80 * GIB,
            bf16_flops=312e12,
            fp8_flops=None,
            hbm_bytes_per_s=2.039e12,
            nvlink_bytes_per_s=300e9,
            gpu_hour_usd=1.79,
        ),
        GpuSpec(
            name="l40s",
            memory_bytes=48_305_799_168,
            bf16_flops=362.05e12,
            fp8_flops=733e12,
            hbm_bytes_per_s=864e9,
            nvlink_bytes_per_s=32e9,
            gpu_hour_usd=1.19,
        ),
    )
}

_LLAMA31_8B = ModelSpec(
    name="meta-llama/Meta-Llama-3.1-8B",
    aic_name="meta-llama/Meta-Llama-3.1-8B",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate=14336,
    vocab=128256,
)
_LLAMA31_70B = ModelSpec(
    name="meta-llama/Meta-Llama-3.1-70B",
    aic_name="meta-llama/Meta-Llama-3.1-70B",
    layers=80,
    hidden=8192,
    heads=64,
    kv_heads=8,
    head_dim=128,
    intermediate=28672,
    vocab=128256,
)

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _LLAMA31_8B,
        replace(_LLAMA31_8B, name="meta-llama/Llama-3.1-8B-Instruct"),
        _LLAMA31_70B,
        replace(_LLAMA31_70B, name="meta-llama/Llama-3.1-70B"),
        replace(_LLAMA31_70B, name="meta-llama/Llama-3.1-70B-Instruct"),
        ModelSpec(
            name="Qwen/Qwen3-32B",
            aic_name="Qwen/Qwen3-32B",
            layers=64,
            hidden=5120,
            heads=64,
            kv_heads=8,
            head_dim=128,
            intermediate=25600,
            vocab=151936,
            qk_norm=True,
        ),
        ModelSpec(
            name="Qwen/Qwen3-8B",
            aic_name="Qwen/Qwen3-8B",
            layers=36,
            hidden=4096,
            heads=32,
            kv_heads=8,
            head_dim=128,
            intermediate=12288,
            vocab=151936,
            qk_norm=True,
        ),
        ModelSpec(
            name="Qwen/Qwen3-30B-A3B",
            aic_name="Qwen/Qwen3-30B-A3B",
            layers=48,
            hidden=2048,
            heads=32,
            kv_heads=4,
            head_dim=128,
            intermediate=6144,
            vocab=151936,
            experts=128,
            topk=8,
            moe_intermediate=768,
            qk_norm=True,
        ),
    )
}


def gpu_spec(name: str) -> GpuSpec:
    """Look up a GPU by its AIConfigurator system name.

    Raises:
        ConfigError: the GPU is not in the catalog.
    """
    try:
        return GPUS[name]
    except KeyError:
        raise ConfigError("gpu", name, " | ".join(sorted(GPUS))) from None


def model_spec(name: str) -> ModelSpec:
    """Look up a model architecture by its Hugging Face id.

    Raises:
        ConfigError: the model is not in the catalog.
    """
    try:
        return MODELS[name]
    except KeyError:
        raise ConfigError("model", name, " | ".join(sorted(MODELS))) from None
