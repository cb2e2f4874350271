"""The dry run before a study: knob values that make most configurations unable to run."""

from __future__ import annotations

from pathlib import Path

from search.study.dry_run import unrunnable_values
from search.study.study_file import parse_study

ROOT = Path(__file__).resolve().parents[3]


def _study(knobs: dict[str, object], budget: int = 8) -> object:
    return parse_study(
        {
            "name": "dry",
            "model": "meta-llama/Llama-3.1-70B-Instruct",
            "gpu": "h100_sxm",
            "gpu_budget": budget,
            "deployment": {"timing": "roofline"},
            "workload": {"trace": str(ROOT / "tests/data/traces/mooncake_small.jsonl")},
            "space": {"knobs": knobs},
        },
        dry=False,
    )


def test_a_value_whose_configurations_never_fit_is_named_with_the_reason() -> None:
    sf = _study({"tp": {"type": "choice", "values": [1, 2, 4, 8]},
                 "engine.max_num_seqs": {"type": "choice", "values": [32, 256]}})  # fmt: skip
    lines = unrunnable_values(sf.problem)  # type: ignore[attr-defined]
    assert len(lines) == 1
    assert lines[0].startswith("tp=1: ")
    assert "does not fit on h100_sxm with tp=1" in lines[0]
    n_bad, n = lines[0].removeprefix("tp=1: ").split(" sampled")[0].split(" of ")
    assert n_bad == n  # every sampled point with tp=1 fails


def test_budget_refusals_and_runnable_values_are_not_flagged() -> None:
    # tp=8 with 8 workers is over a budget of 8 GPUs whenever workers is a knob: the optimizers
    # resample those, so they are not worth a warning
    sf = _study({"tp": {"type": "choice", "values": [2, 4, 8]},
                 "workers": {"type": "choice", "values": [1, 4]}})  # fmt: skip
    assert unrunnable_values(sf.problem) == []  # type: ignore[attr-defined]
