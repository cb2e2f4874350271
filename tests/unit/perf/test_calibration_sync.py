"""Async scheduling (issue 19): a vLLM engine without it pays the profile's ``synchronous``
step overheads on top; rows read from the silicon CSV say which engines ran without it; the
fit recovers those overheads beside the backend's own terms."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, WorkloadError
from dynosim.perf.calibration import (
    BackendCalibration,
    CalibrationProfile,
    StepCalibration,
    profile_from_dict,
)
from dynosim.perf.factory import step_time_model
from dynosim.validation.calibrate import Design, FitOptions, fit_backend, predict
from dynosim.validation.measurement import Measurement
from dynosim.validation.measurements import read_measurements
from dynosim.validation.silicon import silicon_csv
from dynosim.validation.validate import overlapped, row_config

HOST = np.array([20_000.0, 5.0])


def test_step_for_adds_the_synchronous_terms() -> None:
    step = StepCalibration(base_us=500.0, per_request_us=2.0, prefill=1.2, decode=0.9)
    sync = StepCalibration(base_us=3000.0, per_request_us=40.0, per_token_us=0.5)
    cal = BackendCalibration(step=step, synchronous=sync)
    assert cal.step_for("h100_sxm") == step
    off = cal.step_for("h100_sxm", overlapped=False)
    assert (off.base_us, off.per_request_us, off.per_token_us) == (3500.0, 42.0, 0.5)
    assert (off.prefill, off.decode) == (1.2, 0.9)  # the kernels do not change
    assert BackendCalibration(step=step).step_for("h100_sxm", overlapped=False) == step


def test_profile_round_trip_and_bad_field() -> None:
    sync = StepCalibration(base_us=3000.0, per_request_us=40.0)
    p = CalibrationProfile(backends={"vllm": BackendCalibration(synchronous=sync)})
    again = profile_from_dict(p.to_dict(), "p.yaml")
    assert again.backend("vllm").synchronous == sync
    raw = p.to_dict()
    raw["backends"]["vllm"]["synchronous"]["decode"] = 0.8
    with pytest.raises(ConfigError, match=r"p\.yaml.*synchronous.*unknown: decode"):
        profile_from_dict(raw, "p.yaml")


def test_async_scheduling_is_a_vllm_flag() -> None:
    base = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "tp": 1}
    cfg = DeploymentConfig.from_dict({**base, "backend": "vllm",
                                      "engine": {"async_scheduling": False}})  # fmt: skip
    assert cfg.engine.async_scheduling is False
    with pytest.raises(ConfigError, match=r"engine\.async_scheduling.*only with backend: vllm"):
        DeploymentConfig.from_dict({**base, "backend": "sglang",
                                    "engine": {"async_scheduling": False}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"engine\.async_scheduling"):
        DeploymentConfig.from_dict({**base, "backend": "vllm",
                                    "engine": {"async_scheduling": "no"}})  # fmt: skip


def test_silicon_rows_say_which_vllm_engines_ran_synchronously() -> None:
    """vLLM 0.12 rows of AIConfigurator's own runs: no async scheduling (its default before
    0.14); InferenceX rows: on (their recipes pass it, even on vLLM 0.11.2)."""
    rows = [m for m in read_measurements(silicon_csv()) if m.backend == "vllm" and not m.refused]
    by: dict[tuple[str, str], set[bool]] = {}
    for m in rows:
        by.setdefault((m.model, m.gpu), set()).add(overlapped(m))
    assert by[("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm")] == {False}
    assert by[("Qwen/Qwen3-32B", "h100_sxm")] == {False}
    assert by[("openai/gpt-oss-120b", "h100_sxm")] == {True}  # 0.11.2 and 0.18, InferenceX
    assert by[("MiniMaxAI/MiniMax-M2.5", "b200_sxm")] == {True}
    sync = next(m for m in rows if not overlapped(m) and m.pools is None)
    assert row_config(sync).engine.async_scheduling is False
    assert all(overlapped(m) for m in read_measurements(silicon_csv()) if m.backend != "vllm")


MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B")  # 32 and 64 decoder layers


def _design(sync_true: np.ndarray, n: int = 80, seed: int = 5, per_layer: float = 0.0) -> Design:
    """Rows made exactly by ``predict``: the first half of the configurations synchronous,
    alternate configurations of a 32- and a 64-layer model."""
    rng = np.random.default_rng(seed)
    rows, ttft, tpot = [], [], []
    for i in range(n):
        isl = int(rng.integers(128, 4096))
        engine = {"async_scheduling": False} if i % 4 < 2 else {}
        rows.append(Measurement(where=f"s:{i}", model=MODELS[i % 2], gpu="h100_sxm",
                                backend="vllm",
                                tp=1 + i % 4, isl=isl, osl=128, concurrency=8, ttft_ms=1.0,
                                tpot_ms=1.0, engine=engine))  # fmt: skip
        steps = rng.uniform(1, 30)
        prefill = rng.uniform(5, 200)
        ttft.append([steps * 1e-3, steps * 8e-3, steps * 0.9, prefill,
                     prefill + rng.uniform(1, 20), 1e-3, isl * 1e-3])  # fmt: skip
        tpot.append([1e-3, 8e-3 * rng.uniform(0.5, 1), rng.uniform(1e-3, 9e-3),
                     rng.uniform(0, 1), rng.uniform(5, 30), 0.0, 0.0])  # fmt: skip
    d = Design(rows=rows, ttft=np.array(ttft), tpot=np.array(tpot))
    theta = np.concatenate([[800.0, 10.0, 0.0, 0.2, 0.9], HOST])
    t, p = predict(d, theta, extra=np.concatenate([sync_true, [per_layer]]))
    measured = [dataclasses.replace(m, ttft_ms=float(a), tpot_ms=float(b))
                for m, a, b in zip(rows, t, p, strict=True)]  # fmt: skip
    return Design(rows=measured, ttft=d.ttft, tpot=d.tpot)


def test_fit_recovers_the_synchronous_overheads() -> None:
    truth = np.array([4000.0, 30.0, 0.0])
    d = _design(truth)
    assert d.synchronous.sum() == 40
    f = fit_backend(d, "vllm", np.zeros(7), FitOptions(factor_prior=0.0))
    assert f.sync[0] == pytest.approx(truth[0], rel=0.02)
    assert f.sync[1] == pytest.approx(truth[1], abs=1.5)
    assert f.theta[0] == pytest.approx(800.0, rel=0.02)
    t, p = f.fitted()
    assert np.abs(t / d.measured_ttft - 1).max() < 1e-3
    assert np.abs(p / d.measured_tpot - 1).max() < 1e-3


def test_synchronous_overheads_of_one_group_are_not_fitted() -> None:
    """Synchronous rows of one model only: a term no other group can test is not tried (it
    would absorb whatever else that group does), whatever it would gain on that group."""
    d = _design(np.array([4000.0, 30.0, 0.0]))
    one = Design(rows=[m if m.model == MODELS[0] else dataclasses.replace(m, engine={})
                       for m in d.rows], ttft=d.ttft, tpot=d.tpot)  # fmt: skip
    assert one.synchronous.sum() == 20
    f = fit_backend(one, "vllm", np.zeros(7), FitOptions(factor_prior=0.0))
    assert not f.sync.any()
    assert fit_backend(d, "vllm", np.zeros(7), FitOptions(factor_prior=0.0)).sync.any()


def test_fit_without_synchronous_rows_is_unchanged() -> None:
    """No synchronous row: the terms stay 0 and the fit is the one without them."""
    d = _design(np.zeros(3))
    plain = Design(rows=[dataclasses.replace(m, engine={}) for m in d.rows], ttft=d.ttft,
                   tpot=d.tpot)  # fmt: skip
    f = fit_backend(plain, "vllm", np.zeros(7), FitOptions(factor_prior=0.0))
    assert not f.sync.any()
    assert f.theta[0] == pytest.approx(800.0, rel=0.02)


def test_a_synchronous_engine_pays_the_terms_in_every_step(tmp_path: Path) -> None:
    """Hand-computed: the same decode step is exactly ``synchronous`` longer without async
    scheduling (base + per request x n + per token x n for n decode requests)."""
    sync = {"base_us": 3000.0, "per_request_us": 40.0, "per_token_us": 0.5}
    p = CalibrationProfile(backends={"vllm": BackendCalibration(
        step=StepCalibration(base_us=700.0, prefill=1.1, decode=0.9),
        synchronous=StepCalibration(**sync))})  # fmt: skip
    path = tmp_path / "p.yaml"
    p.write(path)
    base = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "tp": 1,
            "backend": "vllm", "calibration": str(path), "timing": "roofline"}  # fmt: skip
    on = step_time_model(DeploymentConfig.from_dict(base))
    off = step_time_model(DeploymentConfig.from_dict(
        {**base, "engine": {"async_scheduling": False}}))  # fmt: skip
    for n in (1, 7, 64):
        extra = 3000.0 + 40.0 * n + 0.5 * n
        assert off.step_us((), n, 1000 * n) - on.step_us((), n, 1000 * n) == pytest.approx(
            extra, abs=1.0
        )
        run_on, run_off = on.decode_run_us(n, 1000 * n, 5), off.decode_run_us(n, 1000 * n, 5)
        assert np.abs(run_off - run_on - extra).max() <= 1.0
        # fast-forward's runs equal the steps one at a time, bit for bit
        assert [int(x) for x in run_off] == [off.step_us((), n, 1000 * n + j * n) for j in range(5)]


def test_synchronous_rows_without_such_overhead_keep_none() -> None:
    """Rows flagged synchronous whose figures need no extra overhead: the fit without the
    terms predicts the held-out configurations at least as well, and is the one kept."""
    d = _design(np.zeros(3))
    assert d.synchronous.any()
    f = fit_backend(d, "vllm", np.zeros(7), FitOptions(factor_prior=0.0))
    assert not f.sync.any()
    assert f.theta[0] == pytest.approx(800.0, rel=0.02)


def test_fit_recovers_an_overhead_per_layer() -> None:
    """Steps that cost 40 us more per decoder layer (1.28 ms on the 32-layer model, 2.56 ms
    on the 64-layer one): the fit finds the 40 us and leaves the synchronous terms at 0."""
    d = _design(np.zeros(3), per_layer=40.0)
    f = fit_backend(d, "vllm", np.zeros(7), FitOptions(factor_prior=0.0))
    assert f.per_layer_us == pytest.approx(40.0, rel=0.02)
    assert not f.sync.any()
    _, p = f.fitted()
    assert np.abs(p / d.measured_tpot - 1).max() < 1e-3
    plain = fit_backend(d, "vllm", np.zeros(7), FitOptions(factor_prior=0.0, per_layer=False))
    assert plain.per_layer_us == 0.0
    assert plain.held_out_error() > f.held_out_error()


def test_step_for_adds_the_per_layer_overhead() -> None:
    cal = BackendCalibration(step=StepCalibration(base_us=500.0), per_layer_us=25.0)
    assert cal.step_for("h200_sxm", layers=64).base_us == 500.0 + 25.0 * 64
    assert cal.step_for("h200_sxm").base_us == 500.0
    again = profile_from_dict(CalibrationProfile(backends={"vllm": cal}).to_dict(), "p.yaml")
    assert again.backend("vllm").per_layer_us == 25.0


def test_plain_csv_states_async_scheduling(tmp_path: Path) -> None:
    head = "model,gpu,backend,tp,isl,osl,concurrency,ttft_ms,tpot_ms,async_scheduling\n"
    row = "meta-llama/Llama-3.1-8B-Instruct,h200_sxm,vllm,1,1024,128,8,40,9,"
    f = tmp_path / "m.csv"
    f.write_text(head + row + "false\n" + row + "\n")
    off, default = read_measurements(f)
    assert not overlapped(off)
    assert overlapped(default)
    assert row_config(off).engine.async_scheduling is False
    f.write_text(head + row + "sometimes\n")
    with pytest.raises(WorkloadError, match=r"m\.csv:2: async_scheduling: got 'sometimes'"):
        read_measurements(f)


def test_per_layer_out_of_range_is_a_one_line_error() -> None:
    raw = CalibrationProfile(backends={"vllm": BackendCalibration()}).to_dict()
    raw["backends"]["vllm"]["per_layer_us"] = -3
    with pytest.raises(ConfigError, match=r"p\.yaml.*per_layer_us in \[0, 1e\+06\]"):
        profile_from_dict(raw, "p.yaml")


def test_the_per_layer_term_in_every_step(tmp_path: Path) -> None:
    """20 us x 32 decoder layers of Llama-3.1-8B = 640 us in every step, fast-forwarded or not."""
    steps = StepCalibration(base_us=700.0, prefill=1.1, decode=0.9)
    models = []
    for name, per_layer in (("plain", 0.0), ("layered", 20.0)):
        path = tmp_path / f"{name}.yaml"
        CalibrationProfile(backends={"vllm": BackendCalibration(
            step=steps, per_layer_us=per_layer)}).write(path)  # fmt: skip
        models.append(step_time_model(DeploymentConfig.from_dict(
            {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "tp": 1,
             "backend": "vllm", "calibration": str(path), "timing": "roofline"})))  # fmt: skip
    plain, layered = models
    for n in (1, 8, 64):
        assert layered.step_us((), n, 900 * n) - plain.step_us((), n, 900 * n) == pytest.approx(
            640.0, abs=1.0
        )
        run = layered.decode_run_us(n, 900 * n, 4)
        assert [int(x) for x in run] == [layered.step_us((), n, 900 * n + j * n) for j in range(4)]
