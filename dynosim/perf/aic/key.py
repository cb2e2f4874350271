"""The key a set of AIConfigurator tables depends on, and where their files live.

:class:`AicKey` names what the tables of a deployment depend on (model, GPU, backend and its
AIConfigurator data version, parallelism, dtypes); its :meth:`~AicKey.filename` is the table's
file in :func:`cache_dir`. Also AIConfigurator's quant modes per dtype, the data version of a
backend on a GPU (kept on disk beside the tables), and the helper every AIConfigurator call
goes through, :func:`_quiet` (cache writes use :func:`dynosim.cache.write_atomic`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynosim.cache import cache_root, write_atomic
from dynosim.config import AicDatabaseMode, DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf.catalog import fp8_scales, gpu_spec, model_spec

TABLE_FORMAT = 6  # 2: parallelism, quantisation, every attention op; 3: context cap;
# 4: decode attention by context per request; 5: the lower monotone envelope, ops AIConfigurator
# lacks (missing_ops); 6: vLLM MLA modules without the old collector's eager norms (fused_norms)


@functools.cache
def aic_version() -> str:
    """Installed aiconfigurator-core version."""
    return importlib.metadata.version("aiconfigurator-core")


def cache_dir() -> Path:
    """Directory of the on-disk table cache: ``aic`` under :func:`dynosim.cache.cache_root`."""
    return cache_root() / "aic"


# dtype -> (AIConfigurator GEMM quant mode, MoE quant mode). None leaves the MoE mode to
# AIConfigurator, which infers it from the checkpoint's quantization_config (as dynosim always
# did for bf16 and fp8). mxfp4 is gpt-oss's native format: BF16 GEMMs, MXFP4 experts; int4_wo
# is Kimi-K2.5's: BF16 GEMMs, INT4 weight-only experts.
QUANT_MODES: dict[str, tuple[str, str | None]] = {
    "bf16": ("bfloat16", None),
    "fp8": ("fp8", None),
    "fp8_block": ("fp8_block", "fp8_block"),
    "nvfp4": ("nvfp4", "nvfp4"),
    "mxfp4": ("bfloat16", "w4a16_mxfp4"),
    "int4_wo": ("bfloat16", "int4_wo"),
}
# TensorRT-LLM runs MXFP4 experts with MXFP8 activations on Blackwell (its default TRTLLM MoE
# backend) and with BF16 activations on Hopper (TRITON): the "MoE Backend Support Matrix" of
# TensorRT-LLM's "Deployment Guide for GPT-OSS on TensorRT-LLM - Blackwell Hardware".
MXFP4_MXFP8 = "w4a8_mxfp4_mxfp8"


@dataclass(frozen=True, slots=True)
class AicKey:
    """What a set of tables depends on (per DP rank when ``attention_dp > 1``)."""

    aic_model: str
    gpu: str
    backend: str
    backend_version: str
    tp: int
    dtype: str
    ep: int = 1
    moe_tp: int = 1
    attention_dp: int = 1
    kv_dtype: str = "bf16"
    database_mode: AicDatabaseMode = "hybrid"
    moe_activation: str | None = None
    allreduce_fusion: bool = False
    fp8_static: bool = False
    fp8_block: bool = False

    def filename(self) -> str:
        """Cache file name (model ids have their slash replaced).

        The database mode is not part of it: the tables are the measured ones whenever
        AIConfigurator has every point, and the file records whether any were estimated.
        """
        model = self.aic_model.replace("/", "--")
        par = f"_ep{self.ep}_mtp{self.moe_tp}_adp{self.attention_dp}_kv{self.kv_dtype}"
        if (moe := quant_modes(self)[1]) != QUANT_MODES[self.dtype][1]:
            par += f"_moe-{moe}"  # a backend- and GPU-specific MoE format of the dtype
        if self.allreduce_fusion:
            par += "_arfused"
        if self.fp8_static:
            par += "_fp8static"
        if self.fp8_block:
            par += "_fp8block"
        return (
            f"{model}_{self.gpu}_{self.backend}-{self.backend_version}_tp{self.tp}_{self.dtype}"
            f"{par}_aic{aic_version()}_f{TABLE_FORMAT}.npz"
        )


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence aiconfigurator's warnings and log noise while it loads and extrapolates."""
    logger = logging.getLogger("aiconfigurator_core")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def resolve_key(config: DeploymentConfig) -> AicKey:
    """The table key of ``config``, or ConfigError if AIConfigurator cannot time it."""
    model = model_spec(config.model)
    gpu = gpu_spec(config.gpu)
    gpu.flops(config.dtype)
    gpu.check_moe_activation(config.moe_activation)
    if model.aic_name is None:
        raise ConfigError(
            "timing", "aic", f"roofline (AIConfigurator has no data for model {config.model})"
        )
    version = _query_version(config.gpu, config.backend)
    return AicKey(
        model.aic_name,
        config.gpu,
        config.backend,
        version,
        config.tp,
        config.dtype,
        ep=config.ep,
        moe_tp=config.moe_tp_size if model.is_moe else 1,
        attention_dp=config.attention_dp,
        kv_dtype=config.kv_dtype,
        database_mode=config.aic_database_mode,
        moe_activation=config.moe_activation,
        allreduce_fusion=bool(config.engine.allreduce_fusion),
        fp8_static=config.dtype == "fp8"
        and fp8_scales(config.model, config.fp8_scales) == "static",
        fp8_block=config.dtype == "fp8" and config.backend == "trtllm" and model.fp8_block_weights,
    )


@functools.lru_cache(maxsize=64)
def _query_version(gpu: str, backend: str) -> str:
    """AIConfigurator's current data version for ``backend`` on ``gpu``.

    Resolving it reads a few dozen YAML files of the package (~0.5 s), so the answers are kept
    in ``<cache>/aic/query_versions_aic<version>.json``: they depend only on the installed
    package.

    Raises:
        ConfigError: AIConfigurator has no data for this backend on this GPU.
    """
    path = cache_dir() / f"query_versions_aic{aic_version()}.json"
    name = f"{gpu}/{backend}"
    known: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            known = loaded
    if isinstance(known.get(name), str):
        return str(known[name])
    with _quiet():
        from aiconfigurator_core.sdk import perf_database

        try:
            version = str(perf_database.resolve_query_version(gpu, backend, "current"))
        except Exception as err:
            raise ConfigError(
                "timing", "aic", f"roofline (AIConfigurator has no {backend} data for {gpu}: {err})"
            ) from None
    known[name] = version
    with contextlib.suppress(OSError):  # a read-only cache is not an error
        write_atomic(path, lambda f: f.write(json.dumps(known, indent=1).encode()))
    return version


def quant_modes(key: AicKey) -> tuple[str, str | None]:
    """AIConfigurator's (GEMM, MoE) quant modes for ``key``'s dtype on its backend and GPU.

    MXFP4 experts take the deployment's ``moe_activation`` if it names one, else the backend's
    default: MXFP8 activations for TensorRT-LLM on Blackwell, BF16 otherwise (vLLM's default
    SM100 backend is FlashInfer's TRT-LLM-gen kernel with BF16 activations; its
    ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` selects the MXFP8 one: ``get_mxfp4_backend``,
    ``vllm/model_executor/layers/quantization/mxfp4.py``).

    Per-tensor FP8 GEMMs with the checkpoint's activation scales (``fp8_static``) are
    AIConfigurator's own mode for them: its measured dynamic FP8 GEMM (the collectors build the
    layer without an ``input_scale``, so it computes one per call) less its measured
    compute-scale kernel (``computescale_perf``: dynamic minus static quantisation).

    TensorRT-LLM runs the FP8 GEMMs of a block-scaled checkpoint (``weight_block_size`` in its
    ``quantization_config``: DeepSeek-V3/R1) as block-scaled ones (``FP8_BLOCK_SCALES``: DeepGEMM
    on Blackwell, ``fp8_block_scaling_gemm`` on Hopper), AIConfigurator's ``fp8_block`` (its
    collector times that Linear path); vLLM's and SGLang's stay ``fp8`` (their AIConfigurator
    block tables time vLLM 0.24's and SGLang 0.5.14's block kernels, up to 4.5x the per-tensor
    time on Hopper, not checked against the releases the measured rows ran).
    """
    gemm, moe = QUANT_MODES[key.dtype]
    if key.fp8_block:
        return "fp8_block", moe
    if key.fp8_static:
        return "fp8_static", moe
    if key.dtype != "mxfp4":
        return gemm, moe
    if key.moe_activation is not None:
        return gemm, MXFP4_MXFP8 if key.moe_activation == "mxfp8" else moe
    if key.backend == "trtllm" and gpu_spec(key.gpu).fp4_flops:
        return gemm, MXFP4_MXFP8  # Blackwell: the only GPUs with FP4 tensor cores
    return gemm, moe
