"""Backend-specific engine knobs in a study: scoped to their backend, dropped for the others."""

from __future__ import annotations

import pytest

from dynosim.errors import ConfigError
from search.study.objectives import Objective
from search.study.problem import Problem
from search.study.space import Space

OBJ = (Objective("output_token_throughput_per_gpu", "maximize"),)
BASE = {"model": "x", "gpu": "h200_sxm"}


def _space(knobs: dict[str, object]) -> Space:
    return Space.from_dict({"knobs": knobs})


def test_an_unscoped_backend_knob_is_refused_when_the_backend_varies() -> None:
    space = _space(
        {
            "backend": {"type": "choice", "values": ["vllm", "sglang"]},
            "engine.enable_mixed_chunk": {"type": "choice", "values": [True, False]},
        }
    )
    with pytest.raises(ConfigError) as err:
        Problem(space=space, objectives=OBJ, base=BASE)
    assert err.value.field == "knobs.engine.enable_mixed_chunk"
    assert "when: {backend: sglang}" in str(err.value)


def test_a_knob_of_another_fixed_backend_is_refused() -> None:
    space = _space({"prefill.engine.capacity_scheduler_policy": {
        "type": "choice", "values": ["MAX_UTILIZATION", "GUARANTEED_NO_EVICT"]}})  # fmt: skip
    with pytest.raises(ConfigError):
        Problem(space=space, objectives=OBJ, base={**BASE, "backend": "sglang"})


def test_scoped_knobs_and_fixed_fields_apply_to_their_backend_only() -> None:
    space = _space(
        {
            "backend": {"type": "choice", "values": ["vllm", "sglang"]},
            "engine.enable_mixed_chunk": {
                "type": "choice", "values": [True, False], "when": {"backend": ["sglang"]}
            },
        }
    )  # fmt: skip
    base = {**BASE, "engine": {"schedule_policy": "lpm", "max_num_seqs": 64}}
    problem = Problem(space=space, objectives=OBJ, base=base)
    vllm = problem.to_config({"backend": "vllm"})
    assert vllm.engine.schedule_policy is None  # SGLang's field, dropped for vLLM
    assert vllm.engine.max_num_seqs == 64
    sglang = problem.to_config({"backend": "sglang", "engine.enable_mixed_chunk": True})
    assert sglang.engine.schedule_policy == "lpm"
    assert sglang.engine.enable_mixed_chunk is True
