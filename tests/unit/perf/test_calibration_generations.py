"""Step terms per GPU generation: the fit recovers a known generation factor, falls back to the
backend's terms where a generation has too few rows, and profiles carry and apply them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf.calibration import (
    BackendCalibration,
    CalibrationProfile,
    StepCalibration,
    gpu_generation,
    load_profile,
)
from dynosim.perf.overhead import step_calibration
from dynosim.validation.calibrate import (
    GENERATION_ROWS,
    PARAMS,
    Design,
    FitOptions,
    fit_backend,
    predict,
    row_steps,
)
from dynosim.validation.calibrate import step_calibration as step_of
from dynosim.validation.measurement import Measurement

# theta: base_us, per_request_us, per_token_us, prefill - decode, decode, request_us, input_us
HOPPER = np.array([400.0, 12.0, 0.0, 0.3, 0.9])
BLACKWELL = np.array([900.0, 20.0, 0.0, 0.2, 1.35])  # slower host work, decode kernels 1.5x
HOST = np.array([20_000.0, 5.0])


def _design(per_gen: dict[str, int], seed: int = 7) -> tuple[Design, np.ndarray]:
    """Rows whose 'measured' TTFT/TPOT are exactly linear in the generation's true terms.

    The design columns are what the probes would give (ms per unit of each term): steps per
    request in the hundreds, requests per step, kernel time of prefill and decode, and the
    host columns (1e-3 and the prompt length x 1e-3).
    """
    rng = np.random.default_rng(seed)
    rows, ttft, tpot, truth = [], [], [], []
    gpus = {"hopper": "h100_sxm", "blackwell": "b200_sxm", "ampere": "a100_sxm"}
    for gen, n in per_gen.items():
        for i in range(n):
            tp = 1 + i % 3  # three configurations per generation
            isl = int(rng.integers(128, 4096))
            m = Measurement(where=f"{gen}:{i}", model="m", gpu=gpus[gen], backend="trtllm",
                            tp=tp, isl=isl, osl=128, concurrency=8, ttft_ms=1.0,
                            tpot_ms=1.0)  # fmt: skip
            steps = rng.uniform(1, 30)
            t_row = [steps * 1e-3, steps * 8 * 1e-3, 0.0, rng.uniform(5, 200), rng.uniform(1, 20),
                     1e-3, isl * 1e-3]  # fmt: skip
            k = rng.uniform(5, 30)
            p_row = [1e-3, 8e-3 * rng.uniform(0.5, 1), 0.0, rng.uniform(0, 1), k, 0.0, 0.0]
            rows.append(m)
            ttft.append(t_row)
            tpot.append(p_row)
            truth.append({"hopper": HOPPER, "blackwell": BLACKWELL}.get(gen, HOPPER))
    d = Design(rows=rows, ttft=np.array(ttft), tpot=np.array(tpot))
    steps_true = np.array(truth)
    theta = np.concatenate([HOPPER, HOST])
    t, p = predict(d, theta, (), steps_true)
    measured = [
        dataclasses.replace(m, ttft_ms=float(a), tpot_ms=float(b))
        for m, a, b in zip(rows, t, p, strict=True)
    ]
    return Design(rows=measured, ttft=d.ttft, tpot=d.tpot), steps_true


def test_the_fit_recovers_a_known_generation_factor() -> None:
    d, _ = _design({"hopper": 60, "blackwell": 60})
    opts = FitOptions(factor_prior=0.0)
    f = fit_backend(d, "trtllm", np.zeros(len(PARAMS)), opts)
    assert sorted(f.generations) == ["blackwell", "hopper"]
    for gen, true in (("hopper", HOPPER), ("blackwell", BLACKWELL)):
        got = f.generations[gen]
        for k in (0, 1, 3, 4):  # base, per request, prefill - decode, decode
            assert got[k] == pytest.approx(true[k], rel=0.02), (gen, PARAMS[k])
    assert f.theta[5:7] == pytest.approx(HOST, rel=0.02)
    # in sample and held out (each TP of a generation predicted from its other two) exact
    t, p = f.fitted()
    assert t == pytest.approx(d.measured_ttft, rel=1e-3)
    assert p == pytest.approx(d.measured_tpot, rel=1e-3)
    assert f.loo_tpot == pytest.approx(d.measured_tpot, rel=1e-3)
    # one set of terms for both generations cannot explain them: the pooled fit misses
    pooled = fit_backend(d, "trtllm", np.zeros(len(PARAMS)),
                         FitOptions(factor_prior=0.0, generations=False))  # fmt: skip
    assert pooled.generations == {}
    assert pooled.held_out_error() > 10 * f.held_out_error() + 0.01


def test_a_generation_with_too_few_rows_takes_the_backend_terms() -> None:
    few = GENERATION_ROWS - 1
    d, _ = _design({"hopper": 60, "blackwell": few})
    f = fit_backend(d, "trtllm", np.zeros(len(PARAMS)), FitOptions(factor_prior=0.0))
    assert "blackwell" not in f.generations
    steps = row_steps(d, f.theta, f.generations)
    is_b = np.array([m.gpu == "b200_sxm" for m in d.rows])
    assert (steps[is_b] == f.theta[:5]).all()
    # a GPU of no generation (A100) always runs with the backend's terms
    d2, _ = _design({"hopper": 30, "blackwell": 30, "ampere": 5})
    f2 = fit_backend(d2, "trtllm", np.zeros(len(PARAMS)), FitOptions(factor_prior=0.0))
    steps2 = row_steps(d2, f2.theta, f2.generations)
    is_a = np.array([m.gpu == "a100_sxm" for m in d2.rows])
    assert gpu_generation("a100_sxm") is None
    assert (steps2[is_a] == f2.theta[:5]).all()


def test_rows_of_one_generation_only_need_no_generation_terms() -> None:
    d, _ = _design({"blackwell": 40})
    f = fit_backend(d, "trtllm", np.zeros(len(PARAMS)), FitOptions(factor_prior=0.0))
    assert f.generations == {}
    assert f.theta[[0, 1, 3, 4]] == pytest.approx(BLACKWELL[[0, 1, 3, 4]], rel=0.02)


def test_a_profile_carries_generation_terms_and_a_deployment_uses_its_gpus(
    tmp_path: Path,
) -> None:
    blackwell = StepCalibration(base_us=900.0, per_request_us=20.0, decode=1.35, prefill=1.55)
    cal = BackendCalibration(step=StepCalibration(base_us=400.0),
                             generations={"blackwell": blackwell})  # fmt: skip
    path = tmp_path / "p.yaml"
    CalibrationProfile(backends={"vllm": cal}).write(path)
    back = load_profile(path).backend("vllm")
    assert back.generations == {"blackwell": blackwell}
    assert back.step_for("b200_sxm") == blackwell
    assert back.step_for("gb200") == blackwell
    assert back.step_for("h100_sxm") == StepCalibration(base_us=400.0)  # no hopper terms
    assert back.step_for("l40s") == StepCalibration(base_us=400.0)
    base = {"model": "meta-llama/Meta-Llama-3.1-8B", "backend": "vllm", "tp": 1,
            "calibration": str(path)}  # fmt: skip
    b200 = DeploymentConfig.from_dict({**base, "gpu": "b200_sxm"})
    h100 = DeploymentConfig.from_dict({**base, "gpu": "h100_sxm"})
    assert step_calibration(b200) == blackwell
    assert step_calibration(h100).base_us == 400.0


def test_an_unknown_generation_in_a_profile_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nbackends:\n  vllm:\n    generations:\n      volta: {base_us: 1}\n")
    with pytest.raises(ConfigError, match=r"generations with fields hopper, blackwell"):
        load_profile(path)


def test_a_kernel_factor_fitted_to_zero_is_written_at_the_profile_floor(tmp_path: Path) -> None:
    step = step_of(np.array([5000.0, 90.0, 29.0, 0.0, 0.0]))
    assert (step.prefill, step.decode, step.base_us) == (0.01, 0.01, 5000.0)
    path = tmp_path / "p.yaml"
    CalibrationProfile(backends={"sglang": BackendCalibration(
        generations={"blackwell": step})}).write(path)  # fmt: skip
    assert load_profile(path).backend("sglang").step_for("b200_sxm") == step
