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
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from search.export.parts import Command, Part

if TYPE_CHECKING:
    from dynosim.config import DeploymentConfig

MODELOPT_PTQ = "examples/llm_ptq/hf_ptq.py"
"""TensorRT Model Optimizer's post-training quantisation script (in its repository)."""

_QFORMAT = {"fp8": "fp8", "nvfp4": "nvfp4"}
"""Trial dtype -> ModelOpt ``--qformat``."""


def needs_checkpoint(cfg: DeploymentConfig) -> bool:
    """Whether the engine needs a pre-quantised checkpoint rather than the named model."""
    if cfg.dtype == "nvfp4":
        return True
    return cfg.dtype == "fp8" and cfg.backend == "trtllm"


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
    if cfg.backend == "trtllm":
        return [], []
    if cfg.dtype == "fp8":
        return ["--quantization", "fp8"], [
            "dtype fp8: --quantization fp8 quantises the BF16 checkpoint to FP8 at load time; "
            "an FP8 checkpoint can be served instead (drop --quantization fp8)"
        ]
    if cfg.dtype == "nvfp4":  # a pre-quantised checkpoint: the engine reads its method
        return [], [f"dtype nvfp4: serving the ModelOpt NVFP4 checkpoint {served_model(cfg)}"]
    if cfg.dtype in ("fp8_block", "mxfp4", "int4_wo"):
        return [], [
            f"dtype {cfg.dtype}: serve {cfg.model}'s {cfg.dtype} release; the engine reads "
            "the weights' quantization from the checkpoint"
        ]
    return [], []
