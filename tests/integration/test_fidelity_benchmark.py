"""benchmarks/fidelity.py: the same rows give the same figures, bit for bit, on 1 or 2 processes,
and the calibration set is exactly CALIBRATION_GROUPS' aggregated rows."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dynosim.validation.silicon import CALIBRATION_GROUPS

ROOT = Path(__file__).resolve().parents[2]


def _fidelity() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "benchmarks" / "fidelity.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fidelity"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_pooled_figures_are_reproducible_bit_for_bit() -> None:
    fid = _fidelity()
    rows = fid.rows_to_replay("Llama-3.1-8B-Instruct/h100_sxm/trtllm/agg", 60)
    assert [m.where for m in rows] == [
        m.where for m in fid.rows_to_replay("Llama-3.1-8B-Instruct/h100_sxm", 60)
    ]
    assert len(rows) == 3  # 177 rows, every 60th: rows 0, 60, 120
    outcomes = fid.run(rows, jobs=1, progress=False)
    one = fid.summarise(rows, outcomes)
    two = fid.summarise(rows, fid.run(rows, jobs=2, progress=False))
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    cal = one["calibration"]
    assert (cal["rows"], cal["agg_replayed"], one["held-out"]["rows"]) == (3, 3, 0)
    pooled = cal["pooled_agg"]
    errs = sorted(abs(o.ttft_ms / m.ttft_ms - 1) for m, o in zip(rows, outcomes, strict=True))
    assert pooled["ttft_mape"] == pytest.approx(100 * sum(errs) / 3, rel=1e-12)
    assert pooled["ttft_medae"] == pytest.approx(100 * errs[1], rel=1e-12)
    assert abs(pooled["tpot_bias"]) <= pooled["tpot_mape"]


def test_the_calibration_set_is_the_issue_19_groups() -> None:
    assert len(CALIBRATION_GROUPS) == 11
    assert len(set(CALIBRATION_GROUPS)) == 11
    fid = _fidelity()
    backends = {b for _, _, b in CALIBRATION_GROUPS}
    assert backends == {"vllm", "sglang", "trtllm"}
    for backend in backends:  # one or more per backend and GPU generation
        gens = {fid.gpu_generation(g) for _, g, b in CALIBRATION_GROUPS if b == backend}
        assert gens == {"hopper", "blackwell"}, backend


@pytest.mark.parametrize("text", ["Qwen/Qwen3-32B/h100_sxm/sglang/disagg"])
def test_disaggregated_rows_of_a_calibration_group_are_held_out(text: str) -> None:
    fid = _fidelity()
    rows = fid.rows_to_replay(text, 1)
    assert rows
    assert all(m.mode == "disagg" for m in rows)
    fake = [fid.Outcome(i, 1.0, 1.0, None, False) for i in range(len(rows))]
    data = fid.summarise(rows, fake)
    assert data["calibration"]["rows"] == 0
    assert data["held-out"]["rows"] == len(rows)


def test_held_out_copies_of_calibration_rows_are_counted_apart() -> None:
    # InferenceX's dumps name its DeepSeek-R1 runs DeepSeek-V3: every DeepSeek-V3 B200 SGLang
    # row repeats a DeepSeek-R1 B200 SGLang (calibration) row, measurement for measurement
    fid = _fidelity()
    v3 = fid.rows_to_replay("deepseek-ai/DeepSeek-V3/b200_sxm/sglang/agg", 1)
    r1 = fid.rows_to_replay("deepseek-ai/DeepSeek-R1/b200_sxm/sglang/agg", 1)
    other = fid.rows_to_replay("Qwen/Qwen3-235B-A22B-FP8/h200_sxm/sglang/agg", 1)
    assert len(v3) == 97
    assert all(fid.copy_of_calibration(m) for m in v3)
    assert not any(fid.copy_of_calibration(m) for m in r1 + other)
    rows = [v3[0], other[0]]
    data = fid.summarise(rows, [fid.Outcome(i, 1.0, 1.0, None, False) for i in range(2)])
    held = data["held-out"]
    assert (held["pooled_agg"]["rows"], held["pooled_agg_unique"]["rows"]) == (2, 1)
    assert held["slices"]["held out by name only"]["copy of a calibration row"]["rows"] == 1


def test_issue_19_targets_are_checked_on_the_figures() -> None:
    _fidelity()  # puts benchmarks/ on the path
    from fidelity_report import targets

    def group(name: str, rows: int, ttft: float, tpot: float) -> dict[str, object]:
        return {"group": name, "rows": rows, "ttft_mape": ttft, "tpot_mape": tpot,
                "ttft_bias": ttft, "tpot_bias": -tpot}  # fmt: skip

    def bucket(ratio: float) -> dict[str, object]:
        return {"rows": 5, "ttft_ratio": ratio, "tpot_ratio": 1.0}

    held = {
        "agg_rows": 100, "agg_replayed": 89,
        "pooled_agg": {"ttft_mape": 34.9, "tpot_mape": 15.1},
        "groups": [group("a/h200/vllm/agg", 10, 60.5, 5.0),
                   group("b/h200/vllm/agg", 9, 99.0, 99.0),
                   group("c/h200/vllm/disagg", 50, 99.0, 99.0),
                   group("d/h200/vllm/agg", 40, 59.0, 29.0)],
        "buckets": {"agg": {"c<=8": bucket(0.8), "c 9-64": bucket(1.25), "c>64": bucket(1.26)}},
    }  # fmt: skip
    cal = {"agg_rows": 10, "agg_replayed": 10,
           "groups": [group("e/h100/trtllm/agg", 3, 20.0, 10.0),
                      group("f/h100/sglang/agg", 3, 5.0, 10.5)]}  # fmt: skip
    text = targets({"calibration": cal, "held-out": held})
    assert "- met: held-out pooled TTFT MAPE <= 35%: 34.9%" in text
    assert "- MISSED: held-out pooled TPOT MAPE <= 15%: 15.1%" in text
    assert "1 over\n  - a/h200/vllm (10 rows): TTFT 60.5% (+)\n" in text  # 9 rows, disagg: not
    assert (
        "- MISSED: median TTFT ratio per concurrency bucket in [0.8, 1.25]: 0.80 / 1.25 / 1.26"
        in text
    )
    assert "- MISSED: held-out rows replayed >= 90%: 89 of 100 (89%)" in text
    assert "1 of 2 within\n  - f/h100/sglang (3 rows): TPOT 10.5% (-)\n" in text
