"""Per-tensor FP8 GEMMs with the checkpoint's activation scales: AIConfigurator's ``fp8_static``."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pandas as pd  # type: ignore[import-untyped]  # aiconfigurator-core reads its tables with it
import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf import aic
from dynosim.perf.aic.build import _compile, _op_indices, _op_names
from dynosim.perf.aic.key import quant_modes
from dynosim.perf.catalog import fp8_scales, model_spec
from dynosim.validation.measurements import read_measurements
from dynosim.validation.silicon import silicon_csv
from dynosim.validation.validate import row_config

pytestmark = pytest.mark.filterwarnings("ignore")

_8B_FP8 = "nvidia/Llama-3.1-8B-Instruct-FP8"


def _config(model: str, **kw: Any) -> DeploymentConfig:
    base = {"model": model, "gpu": "h200_sxm", "backend": "trtllm", "dtype": "fp8", "tp": 1}
    return DeploymentConfig.from_dict(base | kw)


def test_static_scales_come_from_the_served_checkpoint() -> None:
    assert fp8_scales(_8B_FP8) == "static"
    assert fp8_scales("nvidia/Llama-3.3-70B-Instruct-FP8") == "static"
    assert fp8_scales("meta-llama/Llama-3.1-8B-Instruct") == "dynamic"
    assert model_spec("nvidia/Llama-3.3-70B-Instruct-FP8").layers == 80  # 3.1 70B's architecture
    static = aic.resolve_key(_config(_8B_FP8))
    assert static.fp8_static
    assert quant_modes(static)[0] == "fp8_static"
    dynamic = aic.resolve_key(_config("meta-llama/Llama-3.1-8B-Instruct"))
    assert not dynamic.fp8_static
    assert quant_modes(dynamic)[0] == "fp8"
    forced = aic.resolve_key(_config("meta-llama/Llama-3.1-8B-Instruct", fp8_scales="static"))
    assert forced.fp8_static
    assert forced.filename() != dynamic.filename()
    assert not aic.resolve_key(_config(_8B_FP8, fp8_scales="dynamic")).fp8_static


def test_fp8_scales_is_checked_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match=r"fp8_scales: got 'amax'; allowed: dynamic \| static"):
        _config(_8B_FP8, fp8_scales="amax")
    with pytest.raises(ConfigError, match=r"fp8_scales: got 'static'; allowed: unset unless"):
        _config(_8B_FP8, dtype="bf16", fp8_scales="static")
    assert "fp8_scales" not in _config(_8B_FP8).to_dict()  # older configs keep their form


def _compute_scale_ms(gpu: str, version: str, m: int, k: int) -> float:
    """AIConfigurator's measured compute-scale kernel (dynamic minus static quantisation)."""
    root = resources.files("aiconfigurator_core") / "systems" / "data" / gpu / "quantize"
    with resources.as_file(root / "trtllm" / version / "computescale_perf.parquet") as path:
        table = pd.read_parquet(path)
    row = table[(table.m == m) & (table.k == k) & (table.quant_dtype == "fp8")]
    assert len(row) == 1
    return float(row.latency.iloc[0])


def _qkv_ms(model: str) -> tuple[float, str]:
    """The QKV GEMMs of a 4-request decode step (ms) and the backend's data version."""
    key = aic.resolve_key(_config(model))
    h, _ = _compile(key)

    def ops_at(idx: list[int]) -> list[Any]:
        return list(h.evaluate_generation_ops(idx, batch_size=1, s=16))

    ops, _, _ = _op_indices(ops_at)
    qkv = dict(zip(_op_names(h, "generation", ops), ops, strict=True))["qkv_gemm"]
    return float(h.evaluate_generation_ops([qkv], batch_size=4, s=1)[0][1]), key.backend_version


def test_a_static_gemm_is_the_dynamic_one_less_the_measured_compute_scale() -> None:
    """Llama-3.1-8B on one H200 with TensorRT-LLM, 4 decode requests: the QKV projection of
    each of the 32 layers reads 4 x 4,096 activations, so the static step's QKV GEMMs are the
    dynamic ones less 32 compute-scale kernels at m = 4, k = 4,096 (TensorRT-LLM's
    ``quantize_e4m3_per_tensor`` minus ``static_quantize_e4m3_per_tensor``, ~7 us each)."""
    static, version = _qkv_ms(_8B_FP8)
    dynamic, _ = _qkv_ms("meta-llama/Llama-3.1-8B-Instruct")
    scale = _compute_scale_ms("h200_sxm", version, 4, 4096)
    assert 0.004 < scale < 0.012
    assert static == pytest.approx(dynamic - 32 * scale, rel=1e-9, abs=1e-9)


def test_inferencex_70b_fp8_rows_replay_the_modelopt_checkpoint() -> None:
    """InferenceX served ``nvidia/Llama-3.3-70B-Instruct-FP8`` for its NVIDIA FP8 70B runs;
    its NVFP4 runs and every other model keep the model's own scales."""
    rows = [m for m in read_measurements(silicon_csv()) if m.refused is None and m.mode == "agg"]
    llama = [m for m in rows if m.model == "meta-llama/Llama-3.1-70B" and m.client]
    fp8 = [m for m in llama if m.dtype == "fp8"]
    assert len(fp8) >= 100
    assert all(aic.resolve_key(row_config(m)).fp8_static for m in fp8[:: len(fp8) // 5])
    assert all(m.fp8_scales is None for m in llama if m.dtype != "fp8")
    assert all(m.fp8_scales is None for m in rows if m.model != "meta-llama/Llama-3.1-70B")


def test_block_scaled_checkpoints_run_block_gemms_on_tensorrt_llm() -> None:
    """DeepSeek-R1's checkpoint scales its FP8 weights per 128 x 128 block
    (``weight_block_size``): TensorRT-LLM loads it as ``FP8_BLOCK_SCALES``; vLLM and SGLang keep
    AIConfigurator's per-tensor tables (see ``quant_modes``)."""
    assert model_spec("deepseek-ai/DeepSeek-R1").fp8_block_weights
    assert not model_spec("meta-llama/Llama-3.1-70B").fp8_block_weights
    deepseek = {"model": "deepseek-ai/DeepSeek-R1", "gpu": "h200_sxm", "tp": 8, "dtype": "fp8"}
    trt = aic.resolve_key(DeploymentConfig.from_dict(deepseek | {"backend": "trtllm"}))
    assert trt.fp8_block
    assert quant_modes(trt)[0] == "fp8_block"
    assert trt.filename().endswith(
        f"_fp8block_aic{aic.key.aic_version()}_f{aic.key.TABLE_FORMAT}.npz"
    )
    for backend in ("vllm", "sglang"):
        other = aic.resolve_key(DeploymentConfig.from_dict(deepseek | {"backend": backend}))
        assert not other.fp8_block
        assert quant_modes(other)[0] == "fp8"
    llama = aic.resolve_key(_config("meta-llama/Llama-3.1-8B-Instruct"))
    assert not llama.fp8_block
