"""The engine flags a row's recipe passed (InferenceX's launch scripts), as the replay reads."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from dynosim.simulation import Simulation
from dynosim.types import Request
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


@pytest.mark.parametrize(
    ("backend", "router"),
    [("vllm", "least_loaded"), ("trtllm", "least_loaded"), ("sglang", "round_robin")],
)
def test_attention_dp_ranks_sit_behind_the_engines_balancer(backend: str, router: str) -> None:
    """vLLM's front end and TRT-LLM's executor send a request to the least-loaded DP rank,
    SGLang's controller round-robin; a rank's batch limit is not the clients' even share."""
    m = replace(R1, backend=backend, tp=1, ep=8, attention_dp=8, concurrency=16, client=None)
    config = row_config(m, timing="roofline")
    assert config.router == router
    assert config.engine.max_num_seqs == 16
    assert row_config(replace(m, ep=1, attention_dp=1, tp=8), timing="roofline").router == (
        "round_robin"  # one scheduler: nothing to balance
    )


def test_least_loaded_dp_ranks_never_queue_a_client_behind_another() -> None:
    """Closed loop, 4 clients of uneven output lengths on 4 DP ranks (vLLM): each new request
    goes to the rank its client's last request just left, so no rank ever holds two requests;
    round-robin, which ignores the ranks' state, does put two on one rank."""
    m = replace(R1, backend="vllm", tp=2, ep=8, attention_dp=4, concurrency=4, client=None)
    outs = [40, 90, 150, 220]
    requests = [
        Request(id=i, arrival_s=0.0, input_tokens=256, output_tokens=outs[i % 4] + 7 * (i // 4),
                after_id=i - 4 if i >= 4 else None)
        for i in range(32)
    ]  # fmt: skip

    def overlaps(router: str) -> int:
        config = replace(row_config(m, timing="roofline"), router=router)
        rec = Simulation(config, requests).run().records
        n = 0
        for w in np.unique(rec.worker):
            on = np.flatnonzero(rec.worker == w)
            spans = sorted(zip(rec.arrival_us[on], rec.finish_us[on], strict=True))
            n += sum(b[0] < a[1] for a, b in itertools.pairwise(spans))
        return n

    assert overlaps("least_loaded") == 0
    assert overlaps("round_robin") > 0
