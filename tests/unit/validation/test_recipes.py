"""The engine flags a row's recipe passed (InferenceX's launch scripts), as the replay reads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dynosim.validation.measurement import Measurement
from dynosim.validation.validate import recipe_engine, row_config

R1 = Measurement(
    where="x:1", model="deepseek-ai/DeepSeek-R1", gpu="b200_sxm", backend="sglang", tp=8,
    isl=1024, osl=1024, concurrency=32, ttft_ms=1.0, tpot_ms=1.0, dtype="fp8",
    client="inferencex",
)  # fmt: skip


@pytest.mark.parametrize(
    ("change", "interval"),
    [
        ({}, 30),
        ({"concurrency": 16}, 30),
        ({"concurrency": 15}, 10),
        ({"tp": 4, "concurrency": 128}, 10),  # dsr1_fp8_b200.sh's TP4 variant
        ({"tp": 4, "dtype": "nvfp4", "concurrency": 128}, 30),
        ({"gpu": "b300_sxm"}, 30),
        ({"model": "Qwen/Qwen3.5-397B-A17B", "dtype": "bf16", "concurrency": 8}, 10),
        ({"gpu": "h200_sxm"}, None),  # dsr1_fp8_h200.sh passes none
        ({"attention_dp": 8, "concurrency": 256}, None),  # DP attention: 1
        ({"model": "deepseek-ai/DeepSeek-V3"}, 30),  # InferenceX's dumps name R1 runs so
        ({"model": "deepseek-ai/DeepSeek-V3", "gpu": "h200_sxm"}, None),
        ({"model": "nvidia/DeepSeek-V3.1-NVFP4"}, None),  # no recipe of InferenceX's
        ({"client": None}, None),  # not InferenceX's row: no recipe known
    ],
)
def test_sglang_recv_interval_is_the_recipes(
    change: dict[str, object], interval: int | None
) -> None:
    m = replace(R1, **change)  # type: ignore[arg-type]
    assert recipe_engine(m).get("scheduler_recv_interval") == interval
    assert row_config(m).engine.scheduler_recv_interval == interval
    assert recipe_engine(replace(m, backend="vllm")).get("scheduler_recv_interval") is None
