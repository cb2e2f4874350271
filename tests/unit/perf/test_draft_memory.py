"""Issue 23: a speculative draft model's weights count toward the memory fit check."""

from __future__ import annotations

import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import InfeasibleError
from dynosim.perf.catalog import model_spec
from dynosim.perf.memory import check_feasible, weight_bytes_per_gpu

TARGET = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "tp": 1}


def _spec(draft: str) -> dict[str, object]:
    return {"method": "draft", "draft_model": draft, "acceptance": 0.6}


def test_a_draft_models_weights_shrink_the_kv_budget_by_exactly_its_bytes() -> None:
    plain = check_feasible(DeploymentConfig.from_dict(TARGET))
    draft = "Qwen/Qwen3-0.6B"
    spec = check_feasible(DeploymentConfig.from_dict({**TARGET, "speculative": _spec(draft)}))
    extra = weight_bytes_per_gpu(model_spec(draft), "bf16", tp=1, ep=1, moe_tp=1)
    assert extra > 1e9  # ~0.6 B parameters in bf16
    assert spec.weights_bytes_per_gpu == plain.weights_bytes_per_gpu + extra
    assert spec.kv_budget_bytes == plain.kv_budget_bytes - extra


def test_a_671b_draft_on_one_gpu_is_refused_naming_the_draft() -> None:
    config = DeploymentConfig.from_dict({**TARGET, "speculative": _spec("deepseek-ai/DeepSeek-V3")})
    with pytest.raises(InfeasibleError, match="draft model") as exc:
        check_feasible(config)
    assert "\n" not in str(exc.value)
