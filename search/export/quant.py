"""What an engine must load to run a trial's weight dtype: the checkpoint and its flags.

A trial simulated with ``dtype: fp8`` or ``nvfp4`` must not be launched on the BF16 checkpoint
it was named by. Per engine (read for facts, no code copied):

* vLLM (docs.vllm.ai, features/quantization/fp8, "Online Dynamic Quantization"):
  ``--quantization fp8`` quantises a BF16/FP16 checkpoint to per-tensor FP8 at load time, so
  fp8 needs no other checkpoint; ModelOpt checkpoints are detected from their
  ``hf_quant_config.json`` (features/quantization/modelopt).
* SGLang (docs.sglang.io, advanced_features/quantization): ``--quantization fp8`` is online
  FP8 quantisation of a BF16 checkpoint; a pre-quantised checkpoint's method is read from its
  config and must not be given ``--quantization`` as well.
* TensorRT-LLM's PyTorch backend (``trtllm-serve``) runs pre-quantised checkpoints
  (TensorRT-LLM docs, "Quantization": ModelOpt checkpoints, read from
  ``hf_quant_config.json``); it does not quantise BF16 weights at load time, so fp8 and nvfp4
  need such a checkpoint.
* TensorRT Model Optimizer (``NVIDIA/TensorRT-Model-Optimizer`` ``examples/llm_ptq/hf_ptq.py``):
  ``--pyt_ckpt_path MODEL --qformat fp8|nvfp4 --kv_cache_qformat fp8|none --export_path DIR``
  writes a Hugging Face checkpoint (with the tokenizer) that all three engines load.

``fp8_block``, ``mxfp4`` and ``int4_wo`` are formats models are released in (DeepSeek-V3's
block FP8, gpt-oss's MXFP4, Kimi-K2's INT4): the model's own checkpoint is served as named.

FP8 activation scales (``fp8_scales``, see :func:`dynosim.perf.aic.key.quant_modes`): a
ModelOpt FP8 checkpoint (:data:`dynosim.perf.catalog.STATIC_FP8_CHECKPOINTS`) ships its
activation scales and is served as named, with no ``--quantization`` (vLLM and SGLang read
``modelopt`` from its ``hf_quant_config.json`` and refuse a different ``--quantization``).
A BF16 checkpoint simulated with static scales needs ModelOpt's FP8 export (which writes an
``input_scale`` per layer) on every engine; with dynamic scales vLLM and SGLang quantise it
online (``--quantization fp8``: per-tensor scales from each activation's amax), and TensorRT-LLM,
which cannot, serves ModelOpt's export, whose static scales the simulation did not assume.

MXFP4 experts with MXFP8 activations (``moe_activation: mxfp8``) on vLLM:
``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` (``get_mxfp4_backend``,
``vllm/model_executor/layers/quantization/mxfp4.py``).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from dynosim.perf.catalog import fp8_scales
from search.export.parts import Command, Part

if TYPE_CHECKING:
    from dynosim.config import DeploymentConfig

MODELOPT_PTQ = "examples/llm_ptq/hf_ptq.py"
"""TensorRT Model Optimizer's post-training quantisation script (in its repository)."""

_QFORMAT = {"fp8": "fp8", "nvfp4": "nvfp4"}
"""Trial dtype -> ModelOpt ``--qformat``."""


def _released_fp8(cfg: DeploymentConfig) -> bool:
    """Whether the named model is itself an FP8 checkpoint with static activation scales."""
    return cfg.dtype == "fp8" and fp8_scales(cfg.model) == "static"


def _static_scales(cfg: DeploymentConfig) -> bool:
    return fp8_scales(cfg.model, cfg.fp8_scales) == "static"


def needs_checkpoint(cfg: DeploymentConfig) -> bool:
    """Whether the engine needs a pre-quantised checkpoint rather than the named model."""
    if cfg.dtype == "nvfp4":
        return True
    if cfg.dtype != "fp8" or _released_fp8(cfg):
        return False
    return cfg.backend == "trtllm" or _static_scales(cfg)


def served_model(cfg: DeploymentConfig) -> str:
    """The checkpoint the engine loads: the named model, or its ModelOpt-quantised export."""
    if not needs_checkpoint(cfg):
        return cfg.model
    name = PurePosixPath(cfg.model.rstrip("/")).name or "model"
    return f"checkpoints/{name}-{cfg.dtype.upper()}"


def checkpoint_part(cfg: DeploymentConfig) -> Part | None:
    """The ModelOpt command that writes :func:`served_model`, when one is needed."""
    if not needs_checkpoint(cfg):
        return None
    kv = "fp8" if cfg.kv_dtype == "fp8" else "none"
    argv = ("python", MODELOPT_PTQ, "--pyt_ckpt_path", cfg.model, "--qformat",
            _QFORMAT[cfg.dtype], "--kv_cache_qformat", kv, "--export_path",
            served_model(cfg))  # fmt: skip
    engine = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}[cfg.backend]
    notes = (
        f"dtype {cfg.dtype}: {engine} serves a pre-quantised checkpoint; TensorRT Model "
        "Optimizer writes one (run in its repository, on one node with the GPUs to hold the "
        "BF16 model)",
        f"or serve a published {cfg.dtype} ModelOpt checkpoint of {cfg.model} (NVIDIA "
        f"publishes several as nvidia/<model>-{'FP8' if cfg.dtype == 'fp8' else 'FP4'}) in "
        f"place of {served_model(cfg)}",
    )
    return Part(f"checkpoint: {cfg.dtype} weights for {engine}", (Command(argv),), notes)


def weight_flags(cfg: DeploymentConfig) -> tuple[list[str], list[str]]:
    """The weight-quantisation flags of vLLM and SGLang, and notes (TRT-LLM: none)."""
    notes = _moe_activation_notes(cfg)
    if cfg.dtype == "fp8" and _released_fp8(cfg):
        if cfg.fp8_scales == "dynamic":
            notes.append(f"fp8_scales dynamic: {cfg.model} ships static activation "
                         "scales, which the engine uses (simulate fp8_scales: static)")  # fmt: skip
        return [], [*notes, f"dtype fp8: serving {cfg.model} as released (ModelOpt FP8, "
                             "static activation scales; no --quantization)"]  # fmt: skip
    if cfg.backend == "trtllm":
        if cfg.dtype == "fp8" and not _static_scales(cfg):
            notes.append("fp8_scales dynamic: TensorRT-LLM cannot quantise online; ModelOpt's "
                         "FP8 export has static activation scales (fp8_scales: static), which "
                         "the simulation did not assume: re-simulate with it")  # fmt: skip
        return [], notes
    if cfg.dtype == "fp8" and _static_scales(cfg):
        return [], [*notes, f"dtype fp8, fp8_scales static: serving ModelOpt's FP8 export "
                             f"{served_model(cfg)} (no --quantization)"]  # fmt: skip
    if cfg.dtype == "fp8":
        return ["--quantization", "fp8"], [*notes,
            "dtype fp8: --quantization fp8 quantises the BF16 checkpoint to FP8 at load time "
            "(dynamic activation scales, as simulated)"]  # fmt: skip
    if cfg.dtype == "nvfp4":  # a pre-quantised checkpoint: the engine reads its method
        return [], [*notes, f"dtype nvfp4: serving the ModelOpt NVFP4 checkpoint "
                            f"{served_model(cfg)}"]  # fmt: skip
    if cfg.dtype in ("fp8_block", "mxfp4", "int4_wo"):
        return [], [
            *notes,
            f"dtype {cfg.dtype}: serve {cfg.model}'s {cfg.dtype} release; the engine reads "
            "the weights' quantization from the checkpoint",
        ]
    return [], notes


def engine_env(cfg: DeploymentConfig) -> tuple[tuple[str, str], ...]:
    """Environment an engine process needs for what was simulated (vLLM's MXFP8 MoE switch)."""
    if cfg.backend == "vllm" and cfg.moe_activation == "mxfp8":
        return (("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8", "1"),)
    return ()


def _moe_activation_notes(cfg: DeploymentConfig) -> list[str]:
    a = cfg.moe_activation
    if a is None or cfg.backend == "vllm":
        return []
    engine = {"sglang": "SGLang", "trtllm": "TensorRT-LLM"}[cfg.backend]
    return [f"moe_activation {a}: {engine}'s MXFP4 MoE picks its activation precision itself "
            "(no flag); check its kernel choice matches the simulated one"]  # fmt: skip
