"""Model architectures parsed from Hugging Face ``config.json`` files.

The configs come from AIConfigurator's shipped ``model_configs/<Org>--<Name>_config.json`` (looked
up by model id) or from any file the user names (a ``model`` ending in ``.json``). Only the
architectures :class:`ModelSpec` describes exactly are accepted: dense GQA decoders (Llama,
Mistral without a sliding window, Qwen3 with its q/k RMSNorm), mixture-of-experts ones
(Qwen3-MoE, Mixtral, MiniMax-M2), DeepSeek-V3-style models (multi-head latent attention, a
shared expert, dense-first layers: DeepSeek-V3/R1, Kimi-K2; V3.2 and GLM-5 with the
sparse-attention indexer), gpt-oss (alternating sliding-window layers, biases, attention
sinks) and Qwen3.5-MoE (Gated DeltaNet linear-attention layers between gated full-attention
ones); Qwen3.5 and Kimi-K2.5 inside their multimodal wrappers (``text_config``; the vision
tower is not counted). Anything else (hybrid Mamba layers, other layer mixes, other
multimodal wrappers, unknown architectures) is refused with a one-line :class:`ConfigError`
rather than sized wrongly: a wrong KV size gives wrong answers.

A checkpoint's ``quantization_config`` does not change the architecture, and the bytes per weight
come from the deployment's ``dtype``; only whether its FP8 weights are block-scaled
(``weight_block_size``) is read (:attr:`ModelSpec.fp8_block_weights`).
"""

from __future__ import annotations

import functools
import json
import stat
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from dynosim.checks import flag, integer
from dynosim.errors import ConfigError
from dynosim.perf.model_spec import ModelSpec

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
    "DeepseekV3ForCausalLM": False,  # DeepSeek-V3/R1, Kimi-K2 (MLA, shared expert, dense-first)
    "DeepseekV32ForCausalLM": False,  # DeepSeek-V3.2: V3 plus the sparse-attention indexer
    "GlmMoeDsaForCausalLM": False,  # GLM-5: MLA plus DeepSeek sparse-attention indexer
    "GptOssForCausalLM": False,  # gpt-oss: sliding-window layers, biases, attention sinks
    "MiniMaxM2ForCausalLM": True,  # per-layer q/k RMSNorm over all heads
    "Qwen3_5MoeForCausalLM": True,  # Qwen3.5: Gated DeltaNet layers + gated full attention
}
_MODEL_TYPES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
}
# Multimodal wrappers whose text model (``text_config``) dynosim sizes; the vision tower is not
# counted (it runs once per image, and the benchmarks here send text only).
_WRAPPERS = ("KimiK25ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")


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


def max_context(model_id: str) -> int | None:
    """``max_position_embeddings`` of AIConfigurator model ``model_id`` (None if absent)."""
    if model_id not in aic_model_ids():
        return None
    value = text_config(_read_aic_config(model_id)).get("max_position_embeddings")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


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
        info = Path(path).stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CONFIG_BYTES:
            size = f"{info.st_size:,} bytes" if stat.S_ISREG(info.st_mode) else "not a file"
            allowed = f"a config.json file of at most {MAX_CONFIG_BYTES:,} bytes ({size})"
            raise ConfigError("model", path, allowed)
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


_MLA_ARCHS = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")
_LAYER_TYPES: dict[str, tuple[str, ...]] = {
    "GptOssForCausalLM": ("full_attention", "sliding_attention"),
    "Qwen3_5MoeForCausalLM": ("full_attention", "linear_attention"),
}


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The text model's config: ``text_config`` of a wrapper dynosim sizes, else ``cfg``."""
    archs = cfg.get("architectures")
    inner = cfg.get("text_config")
    if isinstance(archs, list) and archs and archs[0] in _WRAPPERS and isinstance(inner, dict):
        out = dict(inner)
        out.setdefault("tie_word_embeddings", cfg.get("tie_word_embeddings", False))
        return out
    return cfg


def unsupported_reason(cfg: dict[str, Any]) -> str | None:
    """Why ``cfg`` describes an architecture :class:`ModelSpec` cannot represent, or None."""
    if "text_config" in cfg:
        return "multimodal wrapper (nested text_config)"
    arch = _architecture(cfg)
    mla = arch in _MLA_ARCHS
    if cfg.get("kv_lora_rank") is not None and not mla:
        return "multi-head latent attention (kv_lora_rank)"
    if cfg.get("hybrid_override_pattern") is not None:
        return "hybrid Mamba/attention layers (hybrid_override_pattern)"
    layer_types = cfg.get("layer_types")
    allowed = _LAYER_TYPES.get(arch, ("full_attention",))
    if layer_types is not None and (
        not isinstance(layer_types, list) or any(t not in allowed for t in layer_types)
    ):
        return "mixed attention layer types (layer_types)"
    if arch not in _LAYER_TYPES and (
        cfg.get("use_sliding_window") is True
        or (cfg.get("sliding_window") is not None and cfg.get("use_sliding_window") is not False)
    ):
        return "sliding-window attention (sliding_window)"
    shared = cfg.get("n_shared_experts") or cfg.get("shared_expert_intermediate_size")
    if shared and not (mla or arch == "Qwen3_5MoeForCausalLM"):
        return "shared experts (n_shared_experts / shared_expert_intermediate_size)"
    if (
        (cfg.get("first_k_dense_replace") and not mla)
        or cfg.get("mlp_only_layers")
        or cfg.get("decoder_sparse_step", 1) not in (None, 1)
        or cfg.get("moe_layer_freq", 1) != 1
    ):
        return "dense and MoE layers mixed (first_k_dense_replace / mlp_only_layers)"
    if cfg.get("n_routed_experts") and not mla:
        return "routed experts described by n_routed_experts"
    if (cfg.get("attention_bias") is True and arch != "GptOssForCausalLM") or cfg.get(
        "mlp_bias"
    ) is True:
        return "projection biases (attention_bias / mlp_bias)"
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


MAX_CONFIG_BYTES = 16 << 20
"""Largest ``config.json`` read (a model's is a few KB; a FIFO or a sparse 2 GB file is refused
before reading)."""
MAX_CONFIG_INT = 1 << 24
"""Largest size or count a ``config.json`` field may hold (16,777,216: a vocabulary, an MLP
width or an expert count of any released model is far below; a 5,000-digit one is refused)."""


def _int(
    name: str, cfg: dict[str, Any], key: str, default: int | None = None, *, low: int = 1
) -> int:
    """``cfg[key]`` (or ``default``): an integer in ``[low, MAX_CONFIG_INT]``.

    The error names the file and the field: ``model PATH: KEY: got VALUE; allowed: ...``.
    """
    value = cfg.get(key, default)
    if value is None:
        raise ConfigError(f"model {name}: {key}", value, "present in config.json (an integer)")
    return integer(f"model {name}: {key}", value, low, MAX_CONFIG_INT)


def _count(name: str, cfg: dict[str, Any], key: str) -> int:
    """An optional count (absent, null or 0: none), e.g. ``q_lora_rank``, ``n_shared_experts``."""
    return _int(name, cfg, key, 0, low=0) if cfg.get(key) is not None else 0


def _flag(name: str, cfg: dict[str, Any], key: str) -> bool:
    """An optional boolean (absent or null: false)."""
    value = cfg.get(key)
    return False if value is None else flag(f"model {name}: {key}", value)


def parse_config(cfg: dict[str, Any], *, name: str, aic_name: str | None) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face ``config.json`` already parsed into ``cfg``.

    Raises:
        ConfigError: a field is missing or malformed, or the architecture is not supported yet.
    """
    quant = cfg.get("quantization_config")
    block_fp8 = isinstance(quant, dict) and bool(quant.get("weight_block_size"))
    cfg = text_config(cfg)
    reason = unsupported_reason(cfg)
    if reason is not None:
        raise _refuse(name, reason)
    arch = _architecture(cfg)
    heads = _int(name, cfg, "num_attention_heads")
    hidden = _int(name, cfg, "hidden_size")
    kv_heads = _int(name, cfg, "num_key_value_heads", heads)  # HF default: multi-head attention
    if heads % kv_heads:
        raise ConfigError("model", name, "a config.json whose KV heads divide its attention heads")
    if cfg.get("head_dim") is None and hidden % heads:
        raise ConfigError("model", name, "a config.json with head_dim (a positive integer)")
    head_dim = _int(name, cfg, "head_dim", hidden // heads)
    expert_key = next(
        (k for k in ("num_experts", "num_local_experts", "n_routed_experts") if cfg.get(k)), None
    )
    experts = topk = moe_intermediate = 0
    # A MoE model without dense layers may omit intermediate_size (Qwen3.5): use the expert's.
    has_dense = expert_key is None or "intermediate_size" in cfg
    intermediate = _int(name, cfg, "intermediate_size") if has_dense else 0
    if expert_key is not None:
        experts = _int(name, cfg, expert_key)
        topk = _int(name, cfg, "num_experts_per_tok")
        if topk > experts:
            raise ConfigError("model", name, "a config.json with num_experts_per_tok <= experts")
        # Mixtral and gpt-oss have no moe_intermediate_size: intermediate_size is the expert's.
        moe_intermediate = _int(name, cfg, "moe_intermediate_size", intermediate or None)
        intermediate = intermediate or moe_intermediate
    extra: dict[str, Any] = {}
    if arch in _MLA_ARCHS:
        extra.update(
            kv_lora_rank=_int(name, cfg, "kv_lora_rank"),
            q_lora_rank=_count(name, cfg, "q_lora_rank"),
            qk_rope_head_dim=_int(name, cfg, "qk_rope_head_dim"),
            qk_nope_head_dim=_int(name, cfg, "qk_nope_head_dim"),
            v_head_dim=_int(name, cfg, "v_head_dim"),
            dense_layers=_count(name, cfg, "first_k_dense_replace"),
            shared_intermediate=_count(name, cfg, "n_shared_experts") * moe_intermediate,
        )
        if cfg.get("index_n_heads"):
            extra.update(
                indexer_heads=_int(name, cfg, "index_n_heads"),
                indexer_head_dim=_int(name, cfg, "index_head_dim"),
            )
    layer_types = cfg.get("layer_types") or []
    if arch == "MiniMaxM2ForCausalLM":
        extra.update(qk_norm_per_layer=cfg.get("qk_norm_type", "per_layer") == "per_layer")
    if arch == "GptOssForCausalLM":
        extra.update(
            attention_bias=True,
            attention_sinks=True,
            expert_bias=True,
            sliding_window=_int(name, cfg, "sliding_window"),
            sliding_layers=sum(t == "sliding_attention" for t in layer_types),
        )
    if arch == "Qwen3_5MoeForCausalLM":
        extra.update(
            output_gate=_flag(name, cfg, "attn_output_gate"),
            shared_intermediate=_count(name, cfg, "shared_expert_intermediate_size"),
            shared_gate=_count(name, cfg, "shared_expert_intermediate_size") > 0,
            linear_layers=sum(t == "linear_attention" for t in layer_types),
            linear_key_heads=_int(name, cfg, "linear_num_key_heads"),
            linear_value_heads=_int(name, cfg, "linear_num_value_heads"),
            linear_key_dim=_int(name, cfg, "linear_key_head_dim"),
            linear_value_dim=_int(name, cfg, "linear_value_head_dim"),
            linear_conv_kernel=_int(name, cfg, "linear_conv_kernel_dim"),
        )
    layers = _int(name, cfg, "num_hidden_layers")
    for key in ("dense_layers", "sliding_layers", "linear_layers"):
        if extra.get(key, 0) > layers:
            field = {"dense_layers": "first_k_dense_replace"}.get(key, "layer_types")
            raise ConfigError(
                f"model {name}: {field}", extra[key], f"at most num_hidden_layers ({layers}) layers"
            )
    return ModelSpec(
        name=name,
        aic_name=aic_name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=_int(name, cfg, "vocab_size"),
        tied_embeddings=_flag(name, cfg, "tie_word_embeddings"),
        experts=experts,
        topk=topk,
        moe_intermediate=moe_intermediate,
        qk_norm=SUPPORTED_ARCHITECTURES[arch],
        fp8_block_weights=block_fp8,
        **extra,
    )
