"""The catalog read from AIConfigurator's shipped model configs and system files."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import aiconfigurator_core
import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf.catalog import (
    GPU_HOUR_USD,
    GPUS,
    MODEL_ALIASES,
    MODELS,
    GpuSpec,
    ModelSpec,
    gpu_names,
    gpu_spec,
    model_names,
    model_spec,
)
from dynosim.perf.deployment import resolve
from dynosim.perf.model_config import aic_model_ids, load_aic_model

AIC_DIR = Path(aiconfigurator_core.__file__).parent
CONFIG_FILES = sorted(
    p.name
    for p in (AIC_DIR / "model_configs").glob("*_config.json")
    if not p.name.endswith("_hf_quant_config.json")
)
SYSTEM_FILES = sorted(
    p.stem
    for p in (AIC_DIR / "systems").glob("*.yaml")
    if any(line.startswith("gpu:") for line in p.read_text().splitlines())
)

# The hand-written catalog before it was read from AIConfigurator's files: every spec of today's
# entries must stay equal to these field by field (results must not change).
OLD_GPUS = {
    "h100_sxm": GpuSpec(
        name="h100_sxm", memory_bytes=80 << 30, bf16_flops=989e12, fp8_flops=1978e12,
        hbm_bytes_per_s=3.35e12, nvlink_bytes_per_s=450e9, gpu_hour_usd=2.99,
    ),
    "h200_sxm": GpuSpec(
        name="h200_sxm", memory_bytes=141 << 30, bf16_flops=989e12, fp8_flops=1978e12,
        hbm_bytes_per_s=4.8e12, nvlink_bytes_per_s=450e9, gpu_hour_usd=3.79,
    ),
    "b200_sxm": GpuSpec(
        name="b200_sxm", memory_bytes=180 << 30, bf16_flops=2250e12, fp8_flops=4500e12,
        hbm_bytes_per_s=7.7e12, nvlink_bytes_per_s=900e9, gpu_hour_usd=5.99,
        fp4_flops=9000e12,  # systems/b200_sxm.yaml fp4_tc_flops (new with the nvfp4 dtype)
    ),
    "a100_sxm": GpuSpec(
        name="a100_sxm", memory_bytes=80 << 30, bf16_flops=312e12, fp8_flops=None,
        hbm_bytes_per_s=2.039e12, nvlink_bytes_per_s=300e9, gpu_hour_usd=1.79,
    ),
    "l40s": GpuSpec(
        name="l40s", memory_bytes=48_305_799_168, bf16_flops=362.05e12, fp8_flops=733e12,
        hbm_bytes_per_s=864e9, nvlink_bytes_per_s=32e9, gpu_hour_usd=1.19,
    ),
}  # fmt: skip
_L8 = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128}
_L70 = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128}
_L8_ID, _L70_ID = "meta-llama/Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B"
OLD_MODELS = [
    ModelSpec(name=_L8_ID, aic_name=_L8_ID, **_L8, intermediate=14336, vocab=128256),
    ModelSpec(
        name="meta-llama/Llama-3.1-8B-Instruct", aic_name=_L8_ID, **_L8, intermediate=14336,
        vocab=128256,
    ),
    ModelSpec(name=_L70_ID, aic_name=_L70_ID, **_L70, intermediate=28672, vocab=128256),
    ModelSpec(
        name="meta-llama/Llama-3.1-70B", aic_name=_L70_ID, **_L70, intermediate=28672,
        vocab=128256,
    ),
    ModelSpec(
        name="meta-llama/Llama-3.1-70B-Instruct", aic_name=_L70_ID, **_L70, intermediate=28672,
        vocab=128256,
    ),
    ModelSpec(
        name="Qwen/Qwen3-32B", aic_name="Qwen/Qwen3-32B", layers=64, hidden=5120, heads=64,
        kv_heads=8, head_dim=128, intermediate=25600, vocab=151936, qk_norm=True,
    ),
    ModelSpec(
        name="Qwen/Qwen3-8B", aic_name="Qwen/Qwen3-8B", layers=36, hidden=4096, heads=32,
        kv_heads=8, head_dim=128, intermediate=12288, vocab=151936, qk_norm=True,
    ),
    ModelSpec(
        name="Qwen/Qwen3-30B-A3B", aic_name="Qwen/Qwen3-30B-A3B", layers=48, hidden=2048,
        heads=32, kv_heads=4, head_dim=128, intermediate=6144, vocab=151936, experts=128, topk=8,
        moe_intermediate=768, qk_norm=True,
    ),
]  # fmt: skip


@pytest.mark.parametrize("name", sorted(OLD_GPUS))
def test_gpu_specs_equal_the_old_hand_written_ones(name: str) -> None:
    assert gpu_spec(name) == OLD_GPUS[name]
    assert GPUS[name] == OLD_GPUS[name]


@pytest.mark.parametrize("old", OLD_MODELS, ids=lambda m: m.name)
def test_model_specs_equal_the_old_hand_written_ones(old: ModelSpec) -> None:
    assert model_spec(old.name) == old
    assert MODELS[old.name] == old


def test_public_tables_keep_todays_entries() -> None:
    assert sorted(GPUS) == sorted(OLD_GPUS) == sorted(GPU_HOUR_USD)
    assert sorted(MODELS) == sorted(m.name for m in OLD_MODELS)
    for alias, base in MODEL_ALIASES.items():
        assert model_spec(alias).aic_name == base


def test_every_shipped_config_is_listed() -> None:
    assert len(CONFIG_FILES) == len(aic_model_ids()) > 50
    assert set(aic_model_ids()) <= set(model_names())


@pytest.mark.parametrize("file_name", CONFIG_FILES)
def test_every_shipped_config_loads_or_is_refused_in_one_line(file_name: str) -> None:
    model_id = file_name.removesuffix("_config.json").replace("--", "/", 1)
    try:
        m = load_aic_model(model_id)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message
        assert model_id in message
        assert "not supported yet: " in message
        return
    assert m.name == m.aic_name == model_id
    assert m.heads % m.kv_heads == 0
    assert m.total_params >= m.active_params > 0
    assert m.is_moe == (m.topk > 0) == (m.moe_intermediate > 0)


@pytest.mark.parametrize(
    ("model_id", "reason"),
    [
        ("deepseek-ai/DeepSeek-V4-Pro", "sliding-window attention"),
        ("moonshotai/Kimi-K3", "multimodal wrapper"),
        ("Qwen/Qwen3-VL-32B-Instruct", "multimodal wrapper"),
        ("stepfun-ai/Step-3.7-Flash", "layer_types"),
        ("nvidia/Nemotron-H-56B-Base-8K", "hybrid Mamba"),
        ("MiniMaxAI/MiniMax-M3", "shared experts"),
        ("nvidia/Llama-3_3-Nemotron-Super-49B-v1", "architecture DeciLMForCausalLM"),
    ],
)
def test_unsupported_architectures_are_refused(model_id: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as err:
        model_spec(model_id)
    assert err.value.field == "model"
    assert err.value.value == model_id


# Parameter counts published on the Hugging Face model cards (total, and active for MoE):
#   Llama-3.1-8B 8.03B, Llama-3.1-70B 70.6B (safetensors size, huggingface.co/meta-llama);
#   Qwen3-8B 8.2B, Qwen3-32B 32.8B, Qwen3-30B-A3B 30.5B, Qwen3-235B-A22B 235B / 22B activated,
#   Qwen3-Coder-480B-A35B-Instruct 480B / 35B activated ("Number of Parameters",
#   huggingface.co/Qwen); Mixtral-8x7B 46.7B / 12.9B active (mistral.ai/news/mixtral-of-experts),
#   Mixtral-8x22B 141B / 39B active (mistral.ai/news/mixtral-8x22b).
# Qwen3-30B-A3B's "3.3B activated" counts the input embedding, which ``active_params`` leaves
# out (3.04B + 0.31B embedding), so only its total is checked.
@pytest.mark.parametrize(
    ("model_id", "total_b", "active_b"),
    [
        ("meta-llama/Meta-Llama-3.1-8B", 8.03, None),
        ("meta-llama/Meta-Llama-3.1-70B", 70.6, None),
        ("Qwen/Qwen3-8B", 8.2, None),
        ("Qwen/Qwen3-32B", 32.8, None),
        ("Qwen/Qwen3-30B-A3B", 30.5, None),
        ("Qwen/Qwen3-235B-A22B", 235.0, 22.0),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct", 480.0, 35.0),
        ("mistralai/Mixtral-8x7B-v0.1", 46.7, 12.9),
        ("mistralai/Mixtral-8x22B-v0.1", 141.0, 39.0),
    ],
)
def test_params_match_the_model_cards(
    model_id: str, total_b: float, active_b: float | None
) -> None:
    m = model_spec(model_id)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.03)
    if active_b is not None:
        assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.03)


def test_mixtral_experts_use_intermediate_size() -> None:
    m = model_spec("mistralai/Mixtral-8x7B-v0.1")
    assert (m.experts, m.topk, m.moe_intermediate, m.qk_norm) == (8, 2, 14336, False)


def test_every_system_file_loads() -> None:
    assert gpu_names() == tuple(SYSTEM_FILES)
    assert {"h100_sxm", "h200_sxm", "b200_sxm", "gb200", "b300_sxm", "l40s"} <= set(gpu_names())
    for name in gpu_names():
        g = gpu_spec(name)
        assert g.name == name
        assert g.memory_bytes > 16 << 30
        assert g.hbm_bytes_per_s > 1e11
        assert g.nvlink_bytes_per_s > 1e9
        assert g.bf16_flops > 5e13
        assert g.fp8_flops is None or g.fp8_flops >= g.bf16_flops
        assert g.gpu_hour_usd == GPU_HOUR_USD.get(name)


def test_gpu_without_price_gives_nan_cost_not_a_crash() -> None:
    assert gpu_spec("gb200").gpu_hour_usd is None
    perf = resolve(DeploymentConfig(model="Qwen/Qwen3-8B", gpu="gb200", timing="roofline"))
    assert math.isnan(perf.gpu_hour_usd)
    priced = DeploymentConfig(
        model="Qwen/Qwen3-8B", gpu="gb200", timing="roofline", gpu_hour_usd=6.5
    )
    assert resolve(priced).gpu_hour_usd == 6.5


def test_unknown_names_list_close_matches() -> None:
    with pytest.raises(ConfigError) as err:
        gpu_spec("h200")
    assert err.value.field == "gpu"
    assert "h200_sxm" in err.value.allowed
    assert "rtx_pro_6000_server" not in err.value.allowed  # close matches, not the whole list
    with pytest.raises(ConfigError) as err:
        model_spec("qwen/qwen3-32b")
    assert err.value.field == "model"
    assert "Qwen/Qwen3-32B" in err.value.allowed
    assert "DeepSeek" not in err.value.allowed
    assert "\n" not in str(err.value)


def test_user_config_json_path(tmp_path: Path) -> None:
    cfg = json.loads((AIC_DIR / "model_configs" / "Qwen--Qwen3-8B_config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = model_spec(str(path))
    assert m.name == str(path)
    assert m.aic_name is None
    assert m == replace(MODELS["Qwen/Qwen3-8B"], name=str(path), aic_name=None)


def test_user_config_json_refused_or_unreadable(tmp_path: Path) -> None:
    mla = tmp_path / "mla.json"
    # MLA is sized for DeepSeek-V3-style architectures only (another one with kv_lora_rank: no)
    mla.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "kv_lora_rank": 512}))
    with pytest.raises(ConfigError, match="multi-head latent attention"):
        model_spec(str(mla))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="valid JSON"):
        model_spec(str(bad))
    with pytest.raises(ConfigError, match="readable"):
        model_spec(str(tmp_path / "missing.json"))
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}))
    with pytest.raises(ConfigError, match="num_attention_heads"):
        model_spec(str(partial))
