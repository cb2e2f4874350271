"""The physical floor (issue 19): a calibrated step never beats the GPU's peak.

Hand-computed: Llama-3.1-8B's BF16 weights (16.06 GB) read once at the H200's 4.8 TB/s take
3,346 us, the floor of a one-request decode step; a profile with ``roofline_floor`` prices a
step whose calibrated kernel time is below its floor at the floor plus the overhead, leaves the
others alone, and fast-forward stays equal to stepping where the floor binds for some steps of
a run and not for others.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf.calibration import (
    BackendCalibration,
    CalibrationProfile,
    StepCalibration,
    profile_from_dict,
)
from dynosim.perf.catalog import gpu_spec, model_spec
from dynosim.perf.factory import step_time_model
from dynosim.perf.linear import LinearStepTime
from dynosim.perf.memory import weight_bytes
from dynosim.perf.overhead import NO_OVERHEAD, CalibratedStepTime
from dynosim.perf.roofline import physical_floor

BASE = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "tp": 1,
        "backend": "vllm", "timing": "roofline"}  # fmt: skip


def test_the_floor_of_a_decode_step_is_the_weights_at_peak_bandwidth() -> None:
    floor = physical_floor(DeploymentConfig.from_dict(BASE))
    weights = weight_bytes(model_spec(BASE["model"]), "bf16")
    expected = weights / gpu_spec("h200_sxm").hbm_bytes_per_s * 1e6
    assert expected == pytest.approx(3346, abs=1)
    assert floor.step_us((), 1, 0) == round(expected)
    # 8,192 prompt tokens: 2 x 8.03 G params x 8,192 tokens at 989 TFLOP/s dense BF16
    assert floor.step_us([(8192, 0)], 0, 0) == pytest.approx(133_400, rel=0.01)


def test_a_calibrated_step_is_never_below_its_floor() -> None:
    inner = LinearStepTime(base_us=0.0, per_token_us=100.0, per_kv_token_us=0.0, per_seq_us=0.0)
    floor = LinearStepTime(base_us=0.0, per_token_us=0.0, per_kv_token_us=1.0, per_seq_us=0.0)
    cal = StepCalibration(base_us=500.0, prefill=0.5, decode=0.5)
    m = CalibratedStepTime(inner, cal, NO_OVERHEAD, floor)
    plain = CalibratedStepTime(inner, cal, NO_OVERHEAD)
    # 4 requests: kernel 0.5 x 400 = 200 us; floor = KV tokens x 1 us
    assert m.step_us((), 4, 100) == plain.step_us((), 4, 100) == 700
    assert m.step_us((), 4, 300) == 300 + 500
    # fast-forward across the point where the floor starts to bind (KV grows 4 a step)
    run = m.decode_run_us(4, 180, 12)
    assert [int(x) for x in run] == [m.step_us((), 4, 180 + 4 * j) for j in range(12)]
    assert run[0] == 700
    assert run[-1] == 180 + 44 + 500
    # a mixed step: the priced kernel time is bounded the same way
    assert m.step_us([(64, 0)], 4, 100) >= floor.step_us([(64, 0)], 4, 100) + 500


@pytest.mark.parametrize("n", [1, 8, 64])
def test_a_profile_with_the_floor_prices_steps_at_least_at_it(n: int, tmp_path: Path) -> None:
    models = {}
    for on in (False, True):
        path = tmp_path / f"{on}.yaml"
        CalibrationProfile(backends={"vllm": BackendCalibration(
            step=StepCalibration(base_us=700.0, prefill=0.3, decode=0.3),
            roofline_floor=on)}).write(path)  # fmt: skip
        models[on] = step_time_model(DeploymentConfig.from_dict({**BASE, "calibration": str(path)}))
    floor = physical_floor(DeploymentConfig.from_dict(BASE))
    kv = 2000 * n
    assert models[True].step_us((), n, kv) >= floor.step_us((), n, kv) + 700
    assert models[False].step_us((), n, kv) < floor.step_us((), n, kv) + 700  # 0.3 x roofline
    run = models[True].decode_run_us(n, kv, 6)
    assert [int(x) for x in run] == [models[True].step_us((), n, kv + j * n) for j in range(6)]
    assert np.all(run >= 1)


def test_the_flag_round_trips_and_must_be_a_bool() -> None:
    p = CalibrationProfile(backends={"sglang": BackendCalibration(roofline_floor=True)})
    assert profile_from_dict(p.to_dict(), "p.yaml").backend("sglang").roofline_floor
    raw = p.to_dict()
    raw["backends"]["sglang"]["roofline_floor"] = "yes"
    with pytest.raises(ConfigError, match=r"p\.yaml.*roofline_floor true \| false"):
        profile_from_dict(raw, "p.yaml")


def test_the_floor_reads_routed_experts_from_the_gpus_that_hold_them() -> None:
    """Qwen3-235B-A22B-FP8 on 8 x H200: TP8 (experts split 8 ways by expert TP) and attention
    DP 8 with EP 8 (8 experts' shares per GPU) read the same expert bytes per GPU; the rest of
    the weights is split 8 ways in the first and replicated in the second."""
    base = {"model": "Qwen/Qwen3-235B-A22B-FP8", "gpu": "h200_sxm", "backend": "vllm",
            "dtype": "fp8_block"}  # fmt: skip
    tp8 = physical_floor(DeploymentConfig.from_dict({**base, "tp": 8}))
    adp = physical_floor(DeploymentConfig.from_dict({**base, "tp": 1, "attention_dp": 8,
                                                     "ep": 8}))  # fmt: skip
    assert adp._expert_us == pytest.approx(tp8._expert_us, rel=1e-12)
    assert adp._dense_weight_us == pytest.approx(8 * tp8._dense_weight_us, rel=1e-12)
    spec = model_spec(base["model"])
    routed = spec.expert_params * 1.0  # FP8: one byte a weight
    assert tp8._expert_us == pytest.approx(routed / 8 / 4.8e12 * 1e6, rel=0.01)


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "backend"),
    [("meta-llama/Llama-3.1-8B-Instruct", "h200_sxm", 1, "vllm"),
     ("Qwen/Qwen3-32B", "h100_sxm", 2, "sglang"),
     ("Qwen/Qwen3-32B", "h100_sxm", 1, "trtllm")],
)  # fmt: skip
def test_shipped_profile_runs_equal_steps_with_the_floor(
    model: str, gpu: str, tp: int, backend: str
) -> None:
    """The shipped profile (floor on), AIConfigurator's kernels: every decode run equals its
    steps one at a time, including the runs decided from their two ends (the kernel model's
    decode curve non-decreasing), and such curves are non-decreasing indeed."""
    m = step_time_model(DeploymentConfig.from_dict({"model": model, "gpu": gpu, "tp": tp,
                                                     "backend": backend}))  # fmt: skip
    assert isinstance(m, CalibratedStepTime)
    assert m.floor is not None
    for n in (1, 3, 16, 64, 200):
        for kv in (0, 517 * n, 20_000 * n):
            run = m.decode_run_us(n, kv, 300)
            assert [int(x) for x in run] == [m.step_us((), n, kv + n * j) for j in range(300)]
        if m.inner.decode_monotone(n):  # type: ignore[attr-defined]
            raw = m.inner.decode_run_us(n, 0, 4000)
            assert np.all(np.diff(raw) >= 0)


def test_a_constant_overhead_override_leaves_the_raw_kernels() -> None:
    """``framework_overhead_us`` (how the calibration's replays get the raw kernel model they
    price probes with) is not floored: a probe must see AIConfigurator's kernels, not a floor
    applied at kernel factor 1 (the refit then reproduces the shipped profile)."""
    from dynosim.perf.aic import AicStepTime

    base = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "tp": 1,
            "backend": "vllm"}  # fmt: skip
    assert isinstance(step_time_model(DeploymentConfig.from_dict(base)), CalibratedStepTime)
    raw = step_time_model(DeploymentConfig.from_dict({**base, "framework_overhead_us": 0.0}))
    assert isinstance(raw, AicStepTime)


def test_the_floor_run_in_floats_equals_its_integer_run() -> None:
    floor = physical_floor(DeploymentConfig.from_dict(BASE))
    for n, kv, k in ((1, 0, 1), (8, 12_345, 257), (64, 10**6, 3000), (0, 0, 4)):
        assert np.array_equal(floor.decode_run_float(n, kv, k),
                              floor.decode_run_us(n, kv, k).astype(np.float64))  # fmt: skip
