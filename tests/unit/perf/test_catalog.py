"""The GPU and model catalog."""

from __future__ import annotations

import json
from pathlib import Path

import aiconfigurator_core
import pytest

from dynosim.errors import ConfigError
from dynosim.perf.catalog import GPUS, MODELS, gpu_spec, model_spec

AIC_CONFIGS = Path(aiconfigurator_core.__file__).parent / "model_configs"


def test_required_entries() -> None:
    for gpu in ["h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm", "l40s"]:
        assert gpu_spec(gpu).name == gpu
    for name in [
        "meta-llama/Meta-Llama-3.1-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-70B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-8B",
    ]:
        assert model_spec(name).name == name


def test_unknown_names_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="h100_sxm") as err:
        gpu_spec("h1000")
    assert err.value.field == "gpu"
    with pytest.raises(ConfigError, match="Qwen/Qwen3-32B") as err:
        model_spec("gpt-5")
    assert err.value.field == "model"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_architecture_matches_aiconfigurator_config(name: str) -> None:
    m = model_spec(name)
    assert m.aic_name is not None
    cfg = json.loads((AIC_CONFIGS / f"{m.aic_name.replace('/', '--')}_config.json").read_text())
    assert m.layers == cfg["num_hidden_layers"]
    assert m.hidden == cfg["hidden_size"]
    assert m.heads == cfg["num_attention_heads"]
    assert m.kv_heads == cfg["num_key_value_heads"]
    assert m.head_dim == cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    assert m.intermediate == cfg["intermediate_size"]
    assert m.vocab == cfg["vocab_size"]
    assert m.tied_embeddings == cfg.get("tie_word_embeddings", False)
    assert m.experts == cfg.get("num_experts", 0)


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("meta-llama/Meta-Llama-3.1-8B", 8.03),
        ("meta-llama/Meta-Llama-3.1-70B", 70.55),
        ("Qwen/Qwen3-32B", 32.76),
        ("Qwen/Qwen3-8B", 8.19),
        ("Qwen/Qwen3-30B-A3B", 30.53),
    ],
)
def test_total_params(name: str, billions: float) -> None:
    assert model_spec(name).total_params / 1e9 == pytest.approx(billions, abs=0.01)


def test_moe_active_params_smaller() -> None:
    m = model_spec("Qwen/Qwen3-30B-A3B")
    assert m.is_moe
    assert 2.5e9 < m.active_params < 3.6e9


def test_gpu_numbers_sane() -> None:
    for g in GPUS.values():
        assert g.memory_bytes > 40 * 2**30
        assert g.hbm_bytes_per_s > 5e11
        assert g.bf16_flops > 1e14
        assert g.gpu_hour_usd > 0
        assert g.fp8_flops is None or g.fp8_flops >= g.bf16_flops
    with pytest.raises(ConfigError, match="dtype"):
        gpu_spec("a100_sxm").flops("fp8")
    assert gpu_spec("h100_sxm").flops("fp8") == 2 * gpu_spec("h100_sxm").flops("bf16")
