"""Hardware and model catalog: the numbers the memory and roofline models are built from.

Both halves are read from the data AIConfigurator ships, never hand-copied:

* GPUs: ``gpu_spec(name)`` takes an AIConfigurator system name (``h100_sxm``, ``h200_sxm``,
  ``gb200``, ...; see :func:`gpu_names`) and reads ``systems/<name>.yaml``
  (:mod:`dynosim.perf.systems`). Prices are not in AIConfigurator: :data:`GPU_HOUR_USD` holds
  default prices for the GPUs that have one; any other GPU gets ``gpu_hour_usd`` None, so a
  deployment's cost figures are NaN unless it sets ``gpu_hour_usd`` itself.
* Models: ``model_spec(name)`` takes a Hugging Face id AIConfigurator ships a ``config.json`` for
  (see :func:`model_names`), one of the fine-tune aliases in :data:`MODEL_ALIASES`, or a path to
  any ``config.json`` (a name ending in ``.json``); :mod:`dynosim.perf.model_config` parses it
  and refuses, with a one-line ConfigError, architectures dynosim cannot size correctly yet.
  ``aic_name`` is the id under which AIConfigurator knows the architecture (fine-tunes such as
  ``Llama-3.1-8B-Instruct`` share their base model's kernels; None for a user's file).

:data:`GPUS` and :data:`MODELS` are the entries dynosim had before the catalog came from data
(kept for callers and pinned by tests); the lookups accept every name above.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import replace

from dynosim.errors import ConfigError
from dynosim.perf.model_config import aic_model_ids, load_aic_model, load_config_file
from dynosim.perf.model_spec import ModelSpec
from dynosim.perf.systems import GpuSpec, load_system, system_names

__all__ = [
    "GIB",
    "GPUS",
    "GPU_HOUR_USD",
    "MODELS",
    "MODEL_ALIASES",
    "STATIC_FP8_CHECKPOINTS",
    "GpuSpec",
    "ModelSpec",
    "fp8_scales",
    "gpu_names",
    "gpu_spec",
    "model_names",
    "model_spec",
]

GIB = 1 << 30

# Default price of one GPU-hour (USD): rough 2025 US cloud on-demand list prices per GPU, the
# values dynosim's hand-written catalog carried. A deployment's ``gpu_hour_usd`` overrides them.
GPU_HOUR_USD: dict[str, float] = {
    "h100_sxm": 2.99,
    "h200_sxm": 3.79,
    "b200_sxm": 5.99,
    "a100_sxm": 1.79,
    "l40s": 1.19,
}

# Fine-tunes and renamed checkpoints -> the AIConfigurator id of the base architecture. The
# architecture (and so the kernels AIConfigurator timed) is the base model's; only the weights
# differ. The spec keeps the alias as its ``name`` and the base id as its ``aic_name``.
MODEL_ALIASES: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
    # Quantised checkpoints of an architecture AIConfigurator ships (NVIDIA's ModelOpt exports
    # keep the base model's config.json), and GLM-5 under Zhipu AI's former org name.
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-ai/DeepSeek-R1",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.3-70B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-70B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B",
    "zhipuai/GLM-5": "zai-org/GLM-5",
}

STATIC_FP8_CHECKPOINTS = frozenset(
    {"nvidia/Llama-3.1-8B-Instruct-FP8", "nvidia/Llama-3.3-70B-Instruct-FP8"}
)
"""Per-tensor FP8 checkpoints that ship their activation scales: NVIDIA's ModelOpt exports
(``hf_quant_config.json``: ``quant_algo: FP8``, an ``input_scale`` per linear layer). The engines
quantise activations with that fixed scale, no amax pass: TensorRT-LLM's ``FP8QDQLinearMethod``
(``static_quantize_e4m3_per_tensor`` once ``input_scale`` is loaded,
``tensorrt_llm/_torch/modules/linear.py``), vLLM's and SGLang's ``ModelOptFp8LinearMethod``.
AIConfigurator times them as ``fp8_static`` (its ``_infer_quant_modes_from_raw_config``:
per-tensor FP8 is static unless the checkpoint marks its activations dynamic); an FP8 deployment
of any other model (``--quantization fp8`` of a BF16 checkpoint) scales dynamically."""


def fp8_scales(model: str, chosen: str | None = None) -> str:
    """A deployment's FP8 activation scales.

    ``chosen`` (its ``fp8_scales``) if set, else ``static`` when ``model``'s checkpoint ships
    them and ``dynamic`` otherwise.
    """
    return chosen or ("static" if model in STATIC_FP8_CHECKPOINTS else "dynamic")


_EXAMPLE_MODELS = ("Qwen/Qwen3-32B", "meta-llama/Meta-Llama-3.1-8B")


def gpu_names() -> tuple[str, ...]:
    """Every GPU name :func:`gpu_spec` accepts (AIConfigurator's systems), sorted."""
    return system_names()


def model_names() -> tuple[str, ...]:
    """Every model id :func:`model_spec` looks up (AIConfigurator's configs, the aliases), sorted.

    Some of AIConfigurator's are refused by :func:`model_spec` as not supported yet.
    """
    return tuple(sorted({*aic_model_ids(), *MODEL_ALIASES}))


def _close(name: str, names: tuple[str, ...]) -> list[str]:
    """Up to 3 names like ``name`` (compared case-insensitively)."""
    by_lower = {n.lower(): n for n in names}
    return [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=3)]


@functools.lru_cache(maxsize=64)
def gpu_spec(name: str) -> GpuSpec:
    """Look up a GPU by its AIConfigurator system name.

    Raises:
        ConfigError: the GPU is not in the catalog (the message lists close matches).
    """
    if name not in system_names():
        close = _close(name, system_names())
        hint = " | ".join(close) if close else "an AIConfigurator system name, e.g. h100_sxm"
        raise ConfigError("gpu", name, hint)
    return replace(load_system(name), gpu_hour_usd=GPU_HOUR_USD.get(name))


def model_spec(name: str) -> ModelSpec:
    """Look up a model architecture by Hugging Face id, alias or ``config.json`` path.

    Raises:
        ConfigError: the model is unknown (the message lists close matches), its file cannot be
            read, or its architecture is not supported yet.
    """
    if name in MODEL_ALIASES:
        return replace(load_aic_model(MODEL_ALIASES[name]), name=name)
    if name.endswith(".json"):
        return load_config_file(name)
    if name in aic_model_ids():
        return load_aic_model(name)
    close = _close(name, model_names())
    examples = ", ".join(_EXAMPLE_MODELS)
    hint = " | ".join(close) if close else f"a Hugging Face id such as {examples}"
    raise ConfigError("model", name, f"{hint} (or a path to a config.json)")


_LEGACY_MODELS = (
    "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-70B-Instruct",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-30B-A3B",
)
GPUS: dict[str, GpuSpec]  # built on first use (module __getattr__): reading every spec
MODELS: dict[str, ModelSpec]  # costs ~30 ms of start-up that a simulation does not need


def __getattr__(name: str) -> dict[str, GpuSpec] | dict[str, ModelSpec]:
    """:data:`GPUS` and :data:`MODELS`, built when first read (PEP 562)."""
    table: dict[str, GpuSpec] | dict[str, ModelSpec]
    if name == "GPUS":
        table = {gpu: gpu_spec(gpu) for gpu in GPU_HOUR_USD}
    elif name == "MODELS":
        table = {model: model_spec(model) for model in _LEGACY_MODELS}
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = table
    return table
