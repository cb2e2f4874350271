"""Model architectures parsed from Hugging Face ``config.json`` files.

The configs come from AIConfigurator's shipped ``model_configs/<Org>--<Name>_config.json`` (looked
up by model id) or from any file the user names (a ``model`` ending in ``.json``). Only the
architectures :class:`ModelSpec` describes exactly are accepted: dense GQA decoders (Llama,
Mistral without a sliding window, Qwen3 with its q/k RMSNorm) and plain mixture-of-experts ones
(Qwen3-MoE, Mixtral: every layer routed, no shared expert). Anything else (multi-head latent
attention, hybrid Mamba/linear/sliding-window layers, shared experts, dense-first layers,
multimodal wrappers, projection biases, unknown architectures) is refused with a one-line
:class:`ConfigError` rather than sized wrongly: a wrong KV size gives wrong answers.

A checkpoint's ``quantization_config`` is ignored: the architecture is the same, and the bytes
per weight come from the deployment's ``dtype``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from dynosim.errors import ConfigError

AIC_PACKAGE = "aiconfigurator_core"
_SUFFIX = "_config.json"
_QUANT_SUFFIX = "_hf_quant_config.json"

# architectures[0] (or model_type when a config has no architectures) -> has q/k RMSNorm.
SUPPORTED_ARCHITECTURES: dict[str, bool] = {
    "LlamaForCausalLM": False,
    "MistralForCausalLM": False,
    "MixtralForCausalLM": False,
    "Qwen3ForCausalLM": True,
    "Qwen3MoeForCausalLM": True,
}
_MODEL_TYPES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}


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


def _configs_dir() -> Traversable:
    return resources.files(AIC_PACKAGE) / "model_configs"


def config_file_name(model_id: str) -> str:
    """AIConfigurator's config file name for ``model_id``.

    ``Qwen/Qwen3-32B`` -> ``Qwen--Qwen3-32B_config.json``.
    """
    return model_id.replace("/", "--") + _SUFFIX


@functools.lru_cache(maxsize=1)
def aic_model_ids() -> tuple[str, ...]:
    """Ids of the models AIConfigurator ships a ``config.json`` for (loadable or not), sorted."""
    ids = []
    for entry in _configs_dir().iterdir():
        name = entry.name
        if entry.is_file() and name.endswith(_SUFFIX) and not name.endswith(_QUANT_SUFFIX):
            ids.append(name.removesuffix(_SUFFIX).replace("--", "/", 1))
    return tuple(sorted(ids))


@functools.lru_cache(maxsize=256)
def _read_aic_config(model_id: str) -> dict[str, Any]:
    data: Any = json.loads((_configs_dir() / config_file_name(model_id)).read_text("utf-8"))
    if not isinstance(data, dict):
        raise ConfigError("model", model_id, "a config.json holding a JSON object")
    return data


def load_aic_model(model_id: str) -> ModelSpec:
    """The architecture of AIConfigurator model ``model_id`` (its ``aic_name`` is the id).

    Raises:
        ConfigError: AIConfigurator has no config for it, or dynosim cannot model it yet.
    """
    if model_id not in aic_model_ids():
        raise ConfigError("model", model_id, "a model id AIConfigurator ships a config for")
    return _parse_cached(model_id)


@functools.lru_cache(maxsize=256)
def _parse_cached(model_id: str) -> ModelSpec:
    return parse_config(_read_aic_config(model_id), name=model_id, aic_name=model_id)


@functools.lru_cache(maxsize=64)
def load_config_file(path: str) -> ModelSpec:
    """The architecture in a user's Hugging Face ``config.json`` (``aic_name`` None).

    The file is read once per process (cached by path).

    Raises:
        ConfigError: the file cannot be read, is not a JSON object, or dynosim cannot model it.
    """
    try:
        data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError("model", path, f"a readable config.json ({reason})") from None
    except UnicodeDecodeError:
        raise ConfigError("model", path, "a config.json in UTF-8") from None
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at line {exc.lineno}"
        raise ConfigError("model", path, f"a valid JSON config.json ({where})") from None
    if not isinstance(data, dict):
        raise ConfigError("model", path, "a config.json holding a JSON object")
    return parse_config(data, name=path, aic_name=None)


def _refuse(name: str, what: str) -> ConfigError:
    return ConfigError("model", name, f"a model dynosim can size; not supported yet: {what}")


def unsupported_reason(cfg: dict[str, Any]) -> str | None:
    """Why ``cfg`` describes an architecture :class:`ModelSpec` cannot represent, or None."""
    if "text_config" in cfg:
        return "multimodal wrapper (nested text_config)"
    if cfg.get("kv_lora_rank") is not None:
        return "multi-head latent attention (kv_lora_rank)"
    if cfg.get("hybrid_override_pattern") is not None:
        return "hybrid Mamba/attention layers (hybrid_override_pattern)"
    layer_types = cfg.get("layer_types")
    if layer_types is not None and (
        not isinstance(layer_types, list) or any(t != "full_attention" for t in layer_types)
    ):
        return "mixed attention layer types (layer_types)"
    if cfg.get("use_sliding_window") is True or (
        cfg.get("sliding_window") is not None and cfg.get("use_sliding_window") is not False
    ):
        return "sliding-window attention (sliding_window)"
    if cfg.get("n_shared_experts") or cfg.get("shared_expert_intermediate_size"):
        return "shared experts (n_shared_experts / shared_expert_intermediate_size)"
    if (
        cfg.get("first_k_dense_replace")
        or cfg.get("mlp_only_layers")
        or cfg.get("decoder_sparse_step", 1) not in (None, 1)
    ):
        return "dense and MoE layers mixed (first_k_dense_replace / mlp_only_layers)"
    if cfg.get("n_routed_experts"):
        return "routed experts described by n_routed_experts"
    if cfg.get("attention_bias") is True or cfg.get("mlp_bias") is True:
        return "projection biases (attention_bias / mlp_bias)"
    arch = _architecture(cfg)
    if arch not in SUPPORTED_ARCHITECTURES:
        return f"architecture {arch} (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
    return None


def _architecture(cfg: dict[str, Any]) -> str:
    archs = cfg.get("architectures")
    if isinstance(archs, list) and len(archs) == 1 and isinstance(archs[0], str):
        return archs[0]
    if archs is None and isinstance(cfg.get("model_type"), str):
        return _MODEL_TYPES.get(cfg["model_type"], f"model_type {cfg['model_type']}")
    return repr(archs)


def _int(name: str, cfg: dict[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError("model", name, f"a config.json with {key} (a positive integer)")
    return value


def parse_config(cfg: dict[str, Any], *, name: str, aic_name: str | None) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face ``config.json`` already parsed into ``cfg``.

    Raises:
        ConfigError: a field is missing or malformed, or the architecture is not supported yet.
    """
    reason = unsupported_reason(cfg)
    if reason is not None:
        raise _refuse(name, reason)
    heads = _int(name, cfg, "num_attention_heads")
    hidden = _int(name, cfg, "hidden_size")
    kv_heads = _int(name, cfg, "num_key_value_heads", heads)  # HF default: multi-head attention
    if heads % kv_heads:
        raise ConfigError("model", name, "a config.json whose KV heads divide its attention heads")
    if cfg.get("head_dim") is None and hidden % heads:
        raise ConfigError("model", name, "a config.json with head_dim (a positive integer)")
    head_dim = _int(name, cfg, "head_dim", hidden // heads)
    intermediate = _int(name, cfg, "intermediate_size")
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    topk = moe_intermediate = 0
    if experts:
        experts = _int(name, cfg, "num_experts" if cfg.get("num_experts") else "num_local_experts")
        topk = _int(name, cfg, "num_experts_per_tok")
        if topk > experts:
            raise ConfigError("model", name, "a config.json with num_experts_per_tok <= experts")
        # Mixtral has no moe_intermediate_size: its intermediate_size is the expert's.
        moe_intermediate = _int(name, cfg, "moe_intermediate_size", intermediate)
    return ModelSpec(
        name=name,
        aic_name=aic_name,
        layers=_int(name, cfg, "num_hidden_layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=_int(name, cfg, "vocab_size"),
        tied_embeddings=cfg.get("tie_word_embeddings", False) is True,
        experts=experts,
        topk=topk,
        moe_intermediate=moe_intermediate,
        qk_norm=SUPPORTED_ARCHITECTURES[_architecture(cfg)],
    )
