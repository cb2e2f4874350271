"""Calibration profiles: loading (one-line errors), error-band arithmetic, the calibrated step."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dynosim.config import DeploymentConfig, HostConfig
from dynosim.errors import ConfigError
from dynosim.perf.calibration import DEFAULT_PROFILE, StepCalibration, load_profile
from dynosim.perf.error_bands import band, parse_quantile, tightened, with_margin, z_score
from dynosim.perf.linear import LinearStepTime
from dynosim.perf.overhead import (
    NO_OVERHEAD,
    CalibratedStepTime,
    FrameworkOverhead,
    calibrated,
    step_calibration,
    with_calibration,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "measurements"


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    return f


def test_the_shipped_default_profile_loads_and_names_what_it_was_fitted_on() -> None:
    p = load_profile()
    assert p.source == str(DEFAULT_PROFILE)
    for backend in ("trtllm", "sglang", "vllm"):
        assert p.backend(backend).step.base_us >= 0
    assert p.fitted_on.get("groups"), "the default profile must list its calibration groups"
    assert p.sigma("trtllm", "ttft") > 0
    assert p.sigma("trtllm", "itl") == p.sigma("trtllm", "tpot")


def test_the_shipped_profile_is_fitted_on_the_calibration_set_with_a_vllm_section() -> None:
    """Issue 19: every backend (vLLM too) fitted on the 11 calibration groups, factors in range."""
    from dynosim.validation.calibrate import FACTOR_BOUNDS
    from dynosim.validation.silicon import CALIBRATION_GROUPS

    p = load_profile()
    assert sorted(p.fitted_on["groups"]) == sorted("/".join(g) for g in CALIBRATION_GROUPS)
    lo, hi = FACTOR_BOUNDS
    for backend in ("trtllm", "sglang", "vllm"):
        b = p.backend(backend)
        assert set(b.sigma) == {"ttft", "tpot"}, backend  # fitted: a held-out spread
        for step in (b.step, *b.generations.values()):
            # either split (calibrate fits both): each factor in the physical range
            assert lo <= min(step.decode, step.prefill) <= max(step.decode, step.prefill) <= hi, (
                backend,
                step,
            )
    vllm = p.backend("vllm")
    assert set(vllm.generations) == {"hopper", "blackwell"}  # it has rows of both
    assert vllm.step_for("b200_sxm") == vllm.generations["blackwell"]
    assert vllm.step_for("h200_sxm") == vllm.generations["hopper"]


def test_a_source_overrides_the_backend_host_field_by_field_and_round_trips(
    tmp_path: Path,
) -> None:
    f = _write(tmp_path, "backends: {trtllm: {host: {request_us: 5000, input_token_us: 2, "
                         "output_token_us: 90}, sources: {a.csv: {client: queued, "
                         "request_us: 30000, output_token_us: 0}}}}")  # fmt: skip
    b = load_profile(f).backend("trtllm")
    own = b.host_for("a.csv")
    assert (own.request_us, own.input_token_us, own.output_token_us) == (30000, 2, 0)
    assert b.host_for("other.csv") == b.host
    assert b.client_for("other.csv") == "closed-loop"
    assert b.client_for("a.csv") == "queued"
    load_profile(f).write(tmp_path / "again.yaml")
    assert load_profile(tmp_path / "again.yaml").backend("trtllm").sources == b.sources


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("backends: {trtllm: {step: {base_us: -5}}}", r"base_us in \[0, 1e\+07\] \(got -5\)"),
        ("backends: {trtllm: {step: {base: 5}}}", r"unknown: base"),
        ("backends: {tensorflow: {}}", r"unknown: tensorflow"),
        ("backends: {sglang: {sigma: {ttft: fast}}}", r"sigma.ttft a number"),
        ("version: 7", r"version 1 \(got 7\)"),
        (
            "backends: {sglang: {unrecorded_client: aiperf}}",
            r"unrecorded_client closed-loop \| inferencex \| queued \(got 'aiperf'\)",
        ),
        (
            "backends: {trtllm: {sources: {a.csv: {client: bursty}}}}",
            r"sources\['a.csv'\].client closed-loop \| inferencex \| queued \(got 'bursty'\)",
        ),
        ("backends: {trtllm: {sources: [a.csv]}}", r"sources a mapping"),
        ("backends: {trtllm: {sources: {a.csv: {request_us: 5}}}}", r"\['a.csv'\] with a client"),
        (
            "backends: {trtllm: {sources: {a.csv: {client: queued, request_us: -5}}}}",
            r"sources\['a.csv'\].request_us in \[0, 1e\+07\]",
        ),
        ("backends: [1, 2", r"invalid YAML"),
    ],
)
def test_a_bad_profile_is_one_line_naming_the_field_and_file(
    tmp_path: Path, text: str, match: str
) -> None:
    f = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=match) as info:
        load_profile(f)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("calibration: got ")
    assert str(f) in msg


def test_a_missing_profile_is_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^calibration: got '.*nope\.yaml'; allowed: a "
                       r"readable profile YAML file \(No such file or directory\)$"):  # fmt: skip
        load_profile(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match=r"bad_profile\.yaml"):
        load_profile(DATA / "bad_profile.yaml")


def test_a_deployment_names_its_profile_and_takes_its_host_cost(tmp_path: Path) -> None:
    _write(tmp_path, "backends: {vllm: {step: {base_us: 100, per_request_us: 2}, "
                         "host: {request_us: 5000, input_token_us: 1.5}}}")  # fmt: skip
    d = DeploymentConfig.from_dict({"model": "Qwen/Qwen3-8B", "gpu": "h200_sxm",
                                    "calibration": "p.yaml"})  # fmt: skip
    applied = with_calibration(d, base_dir=tmp_path)  # relative to the deployment's folder
    assert applied.calibration == str(tmp_path / "p.yaml")
    assert applied.host is not None
    assert (applied.host.request_us, applied.host.input_token_us) == (5000.0, 1.5)
    assert with_calibration(applied, base_dir=tmp_path) == applied  # idempotent
    assert step_calibration(applied) == StepCalibration(base_us=100.0, per_request_us=2.0)
    assert applied.host.processes is None  # delays only: no process count
    # a streaming cost is run as it was fitted: with the server's default process count
    _write(tmp_path, "backends: {trtllm: {host: {request_us: 5000, output_token_us: 90}}}")
    trt = with_calibration(DeploymentConfig.from_dict(
        {"model": "Qwen/Qwen3-8B", "gpu": "h200_sxm", "backend": "trtllm",
         "calibration": str(tmp_path / "p.yaml")}))  # fmt: skip
    assert trt.host == HostConfig(request_us=5000.0, output_token_us=90.0, postprocess_workers=0)
    assert trt.host.processes == 1  # trtllm-serve's own process
    with pytest.raises(ConfigError, match=r"calibration: got 'missing\.yaml'"):
        with_calibration(
            DeploymentConfig.from_dict(
                {"model": "Qwen/Qwen3-8B", "gpu": "h200_sxm", "calibration": "missing.yaml"}
            )
        )
    with pytest.raises(ConfigError, match="calibration: got ''"):
        DeploymentConfig.from_dict({"model": "Qwen/Qwen3-8B", "gpu": "h200_sxm",
                                    "calibration": ""})  # fmt: skip


def test_error_band_arithmetic() -> None:
    lo, hi = band(100.0, 0.1)
    assert lo == pytest.approx(100 * math.exp(-0.1))
    assert hi == pytest.approx(100 * math.exp(0.1))
    assert lo * hi == pytest.approx(100.0**2)  # symmetric in log space
    assert z_score(0.9) == pytest.approx(1.2815516, rel=1e-6)
    assert tightened(2000.0, 0.2, 0.9) == pytest.approx(2000 / math.exp(1.2815516 * 0.2))
    assert tightened(2000.0, 0.0, 0.9) == 2000.0
    assert with_margin("time_to_first_token.p90", "<=", 2000, 0.2, 0.9) == pytest.approx(
        tightened(2000, 0.2, 0.9)
    )
    # a rate floor (1/ITL) is raised, a metric without a spread is unchanged
    assert with_margin("output_token_throughput_per_user.avg", ">=", 50, 0.1, 0.9) == (
        pytest.approx(50 * math.exp(1.2815516 * 0.1))
    )
    assert with_margin("request_throughput", ">=", 5, 0.3, 0.9) == 5
    assert [parse_quantile(x, "q") for x in ("p90", 0.95, "99")] == [0.9, 0.95, 0.99]
    for bad in ("p40", "high", 1.5, True):
        with pytest.raises(ConfigError, match=r"^q: got"):
            parse_quantile(bad, "q")


def _linear() -> LinearStepTime:
    return LinearStepTime(base_us=100.0, per_token_us=2.0, per_kv_token_us=0.01, per_seq_us=5.0)


def test_calibrated_step_applies_factors_per_phase_and_the_per_token_term() -> None:
    inner = _linear()
    cal = StepCalibration(base_us=50.0, per_request_us=3.0, per_token_us=0.5, prefill=2.0,
                          decode=0.5)  # fmt: skip
    m = CalibratedStepTime(inner, cal, NO_OVERHEAD)
    kernel, alone = inner.step_us([(100, 0)], 4, 400), inner.step_us([], 4, 400)
    chunks = inner.step_us([(100, 0)], 0, 0)
    # the decodes' share: what they add to the chunk (the step's base is paid once), not more
    # than their own step
    decode = min(kernel - chunks, alone)
    assert decode == alone - 100  # the linear model's base
    assert m.step_us([(100, 0)], 4, 400) == round(
        0.5 * decode + 2.0 * (kernel - decode) + 50 + 3 * 5 + 0.5 * 104
    )
    assert m.step_us([(100, 0)], 0, 0) == round(2.0 * inner.step_us([(100, 0)], 0, 0) + 53 + 50)
    # a prefill factor below the decode factor keeps the price monotone in prefill tokens
    low = CalibratedStepTime(inner, StepCalibration(prefill=0.2, decode=1.0), NO_OVERHEAD)
    times = [low.step_us([(c, 0)] if c else [], 8, 800) for c in (0, 1, 10, 100, 1000)]
    assert times == sorted(times)
    kernel = inner.step_us([], 8, 800)
    assert m.step_us([], 8, 800) == round(0.5 * kernel + 50 + 3 * 8 + 0.5 * 8)
    # fast-forward equals stepping, bit for bit
    run = m.decode_run_us(8, 800, 50)
    assert run.tolist() == [m.step_us([], 8, 800 + 8 * j) for j in range(50)]
    assert run.dtype == np.int64


def test_a_profile_without_per_token_or_factors_keeps_the_plain_model() -> None:
    d = DeploymentConfig.from_dict({"model": "Qwen/Qwen3-8B", "gpu": "h200_sxm",
                                    "framework_overhead_us": 10.0})  # fmt: skip
    inner = _linear()
    assert calibrated(inner, d) is inner
    assert step_calibration(d) == StepCalibration(base_us=10.0)
    m = CalibratedStepTime(inner, StepCalibration(base_us=7.0), FrameworkOverhead(7.0))
    assert m.step_us([(10, 0)], 2, 20) == inner.step_us([(10, 0)], 2, 20)


def test_an_unknown_field_with_a_newline_is_named_on_one_line(tmp_path: Path) -> None:
    """Found by tests/fuzz/test_fuzz_added.py on the refitted profile: a key "\\n"."""
    path = _write(tmp_path, 'version: 1\n"\\n": 1\nbackends: {}\n')
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert "\n" not in str(err.value)
    assert "(unknown: '\\n')" in str(err.value)
