"""Kernel factors stay in their physical range: where the unbounded optimum lies outside
:data:`FACTOR_BOUNDS`, the fit returns the best point inside it, not a clipped one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from dynosim.errors import ConfigError
from dynosim.validation.calibrate import (
    FACTOR_BOUNDS,
    PARAMS,
    Design,
    FitOptions,
    fit_backend,
    fit_theta,
    predict,
)
from dynosim.validation.measurement import Measurement
from search.cli import main

HOST = np.array([20_000.0, 5.0])
WIDE = (1e-6, 1e6)  # bounds that bind nowhere: the unbounded optimum


def _design(step: np.ndarray, n: int = 60, seed: int = 3) -> Design:
    """Rows whose 'measured' TTFT/TPOT are exactly ``predict`` with step terms ``step``.

    Columns as the probes give them (ms per unit of each term; see
    ``test_calibration_generations``): steps, requests per step, the prefill chunks' kernel
    time, the whole kernel time, and the host columns.
    """
    rng = np.random.default_rng(seed)
    rows, ttft, tpot = [], [], []
    for i in range(n):
        isl = int(rng.integers(128, 4096))
        rows.append(Measurement(where=f"s:{i}", model="m", gpu="h100_sxm", backend="vllm",
                                tp=1 + i % 3, isl=isl, osl=128, concurrency=8, ttft_ms=1.0,
                                tpot_ms=1.0))  # fmt: skip
        steps = rng.uniform(1, 30)
        prefill = rng.uniform(5, 200)
        ttft.append([steps * 1e-3, steps * 8e-3, 0.0, prefill, prefill + rng.uniform(1, 20),
                     1e-3, isl * 1e-3])  # fmt: skip
        tpot.append([1e-3, 8e-3 * rng.uniform(0.5, 1), 0.0, rng.uniform(0, 1),
                     rng.uniform(5, 30), 0.0, 0.0])  # fmt: skip
    d = Design(rows=rows, ttft=np.array(ttft), tpot=np.array(tpot))
    t, p = predict(d, np.concatenate([step, HOST]))
    measured = [dataclasses.replace(m, ttft_ms=float(a), tpot_ms=float(b))
                for m, a, b in zip(rows, t, p, strict=True)]  # fmt: skip
    return Design(rows=measured, ttft=d.ttft, tpot=d.tpot)


def _factors(theta: np.ndarray) -> tuple[float, float]:
    """(prefill, decode) of a parameter vector."""
    return float(theta[3] + theta[4]), float(theta[4])


def _loss(d: Design, theta: np.ndarray) -> float:
    """The fit's robust loss (``soft_l1``, scale 0.1) of the relative errors of TTFT and TPOT."""
    t, p = predict(d, theta)
    r = np.concatenate([t / d.measured_ttft - 1, p / d.measured_tpot - 1]) / 0.1
    return float((2 * (np.sqrt(1 + r**2) - 1)).sum())


@pytest.mark.parametrize(
    ("truth", "bound"),
    [
        (np.array([7000.0, 0.0, 0.0, 0.0, 0.15]), "low"),  # vLLM's 11-group refit
        (np.array([400.0, 12.0, 0.0, 2.0, 1.2]), "high"),  # prefill 3.2
    ],
)
def test_factors_outside_the_bounds_are_fitted_on_them(truth: np.ndarray, bound: str) -> None:
    d = _design(truth)
    idx = np.arange(len(d.rows))
    free = fit_theta(d, idx, FitOptions(factor_prior=0.0, factor_bounds=WIDE))
    # unbounded, the fit recovers the truth: its optimum really is outside the range
    assert _factors(free) == pytest.approx(_factors(truth), rel=0.02)
    theta = fit_theta(d, idx, FitOptions(factor_prior=0.0))
    lo, hi = FACTOR_BOUNDS
    prefill, decode = _factors(theta)
    assert lo - 1e-9 <= decode <= prefill <= hi + 1e-9
    if bound == "low":
        assert decode == pytest.approx(lo)
    else:
        assert prefill == pytest.approx(hi)  # pinned at the bound, decode still fitted
        assert lo < decode < hi
    # the best point in the range, not the unbounded one clipped: no feasible nudge of the
    # factors (the other terms as fitted) lowers the fit's loss
    best = _loss(d, theta)
    for dp, dd in ((0.01, 0.0), (-0.01, 0.0), (0.0, 0.01), (0.0, -0.01), (0.01, 0.01)):
        p, q = prefill + dp, decode + dd
        if lo <= q <= p <= hi:
            other = theta.copy()
            other[3], other[4] = p - q, q
            assert _loss(d, other) >= best * (1 - 1e-3)
    # the other terms refitted to the bounded factors, not the unbounded fit's clipped
    clipped = free.copy()
    clipped[4] = min(max(free[4], lo), hi)
    clipped[3] = min(max(free[3] + free[4], clipped[4]), hi) - clipped[4]
    assert best < 0.9 * _loss(d, clipped)
    # and the backend fit (with leave-one-configuration-out) keeps them too
    f = fit_backend(d, "vllm", np.zeros(len(PARAMS)), FitOptions(factor_prior=0.0))
    assert lo - 1e-9 <= _factors(f.theta)[1] <= _factors(f.theta)[0] <= hi + 1e-9


def test_factors_inside_the_bounds_are_recovered_unchanged() -> None:
    truth = np.array([400.0, 12.0, 0.0, 0.3, 0.9])
    d = _design(truth)
    theta = fit_theta(d, np.arange(len(d.rows)), FitOptions(factor_prior=0.0))
    assert _factors(theta) == pytest.approx(_factors(truth), rel=0.02)
    assert theta[:2] == pytest.approx(truth[:2], rel=0.02)


@pytest.mark.parametrize("bounds", [(0.0, 2.0), (1.2, 2.0), (0.5, 0.9), (1.0, 1.0)])
def test_bounds_that_exclude_one_are_refused(bounds: tuple[float, float]) -> None:
    with pytest.raises(ConfigError, match=r"factor_bounds: got .*; allowed: \(low, high\)"):
        FitOptions(factor_bounds=bounds)


def test_the_cli_refuses_bad_bounds_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.yaml"
    code = main(["calibrate", str(tmp_path / "m.csv"), "--out", str(out),
                 "--factor-bounds", "0", "2"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert not out.exists()
    assert err == ("dynosim calibrate: error: --factor-bounds: got (0.0, 2.0); allowed: "
                   "(low, high) with 0 < low <= 1 <= high and low < high")  # fmt: skip
