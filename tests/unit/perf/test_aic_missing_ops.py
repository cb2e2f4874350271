"""MiniMax-M2's q/k norm over the whole projections, an op AIConfigurator's op list lacks."""

from __future__ import annotations

import math
from typing import Any

import pytest

from dynosim.config import DeploymentConfig, EngineConfig
from dynosim.perf import aic
from dynosim.perf.aic.build import _compile, _op_indices, _op_names
from dynosim.perf.aic.missing_ops import qk_norm_ms
from dynosim.perf.catalog import model_spec

pytestmark = pytest.mark.filterwarnings("ignore")


def _generation(model: str, tp: int) -> tuple[Any, Any, list[int], list[str]]:
    key = aic.resolve_key(
        DeploymentConfig(model=model, gpu="b200_sxm", backend="vllm", dtype="fp8", tp=tp)
    )
    h, _ = _compile(key)
    ops, _, _ = _op_indices(lambda idx: h.evaluate_generation_ops(idx, batch_size=1, s=16))
    return key, h, ops, _op_names(h, "generation", ops)


def test_the_per_layer_norm_is_read_from_the_config() -> None:
    assert model_spec("MiniMaxAI/MiniMax-M2.5").qk_norm_per_layer
    assert not model_spec("Qwen/Qwen3-32B").qk_norm_per_layer  # one norm per head
    assert not model_spec("meta-llama/Llama-3.1-70B").qk_norm_per_layer


@pytest.mark.parametrize("tp", [1, 2])
def test_two_norm_passes_and_one_all_reduce_per_layer_priced_from_the_models_own_ops(
    tp: int,
) -> None:
    """At 4 tokens on TP 2: each pass moves 4 x (48 + 8) x 128 / 2 = 14,336 values, what the
    hidden-wide norm moves for ceil(14,336 / 3,072) = 5 tokens; the all-reduce moves 4 x 8
    bytes, less than one token of the BF16 embedding all-reduce: its 1-token time, 62 layers."""
    key, h, ops, names = _generation("MiniMaxAI/MiniMax-M2.5", tp)

    def at(idx: list[int], tokens: int) -> list[Any]:
        return list(h.evaluate_generation_ops(idx, batch_size=tokens, s=1))

    price = qk_norm_ms(key, at, names, ops)
    assert price is not None
    index = dict(zip(names, ops, strict=True))
    norm_tokens = math.ceil(4 * (48 + 8) * 128 / tp / 3072)
    expected = 2 * float(at([index["add_norm_1"]], norm_tokens)[0][1])
    if tp > 1:
        expected += 62 * float(at([index["embedding_ar"]], 1)[0][1])
        assert float(at([index["embedding_ar"]], 1)[0][1]) > 0
    assert price(4) == pytest.approx(expected, rel=1e-12)


def test_models_without_it_add_nothing() -> None:
    key, h, ops, names = _generation("Qwen/Qwen3-32B", 2)
    at = lambda idx, t: list(h.evaluate_generation_ops(idx, batch_size=t, s=1))  # noqa: E731
    assert qk_norm_ms(key, at, names, ops) is None


def test_names_follow_the_op_list_when_the_all_reduce_is_borrowed() -> None:
    """With vLLM's fused all-reduce the all-reduces are TensorRT-LLM's ops (evaluated after the
    handle's own): each name still belongs to its own index, so the norm's all-reduce is
    priced as the embedding all-reduce, not as whatever op follows it."""
    config = DeploymentConfig(
        model="MiniMaxAI/MiniMax-M2.5", gpu="b200_sxm", backend="vllm", dtype="fp8", tp=2,
        engine=EngineConfig(allreduce_fusion=True),
    )  # fmt: skip
    h, _ = _compile(aic.resolve_key(config))
    ops, _, _ = _op_indices(lambda idx: h.evaluate_generation_ops(idx, batch_size=1, s=16))
    names = _op_names(h, "generation", ops)
    for i, name in zip(ops, names, strict=True):
        assert str(h.evaluate_generation_ops([i], batch_size=1, s=16)[0][0]) == f"generation_{name}"
    assert "embedding_ar" in names
