"""``slo_margin: p90``: latency constraints tightened by the calibration's error spread."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dynosim.errors import ConfigError
from tests.unit.search import fakes


def _profile(tmp_path: Path) -> Path:
    f = tmp_path / "p.yaml"
    f.write_text("backends:\n  vllm: {sigma: {ttft: 0.2, tpot: 0.1}}\n"
                 "  trtllm: {sigma: {ttft: 0.5, tpot: 0.05}}\n")  # fmt: skip
    return f


def test_slo_margin_tightens_latency_constraints_by_the_profile_spread(tmp_path: Path) -> None:
    _profile(tmp_path)
    cons = [
        "time_to_first_token.p90 <= 2000",
        "inter_token_latency.avg <= 50",
        "output_token_throughput_per_user.avg >= 20",
        "request_throughput >= 1",
    ]
    s = fakes.study(tmp_path, constraints=cons, slo_margin="p90",
                    deployment={"backend": "vllm", "calibration": "p.yaml"})  # fmt: skip
    z = 1.2815515655446004
    got = [c.value for c in s.problem.constraints]
    assert got[0] == pytest.approx(2000 / math.exp(z * 0.2))
    assert got[1] == pytest.approx(50 / math.exp(z * 0.1))
    assert got[2] == pytest.approx(20 * math.exp(z * 0.1))
    assert got[3] == 1  # no spread for throughput
    plain = fakes.study(tmp_path, constraints=cons,
                        deployment={"backend": "vllm", "calibration": "p.yaml"})  # fmt: skip
    assert [c.value for c in plain.problem.constraints] == [2000, 50, 20, 1]


def test_slo_margin_with_a_backend_knob_takes_the_widest_spread(tmp_path: Path) -> None:
    _profile(tmp_path)
    space = {"knobs": {**fakes.SPACE["knobs"],
                       "backend": {"type": "choice", "values": ["vllm", "trtllm"]}}}  # fmt: skip
    s = fakes.study(tmp_path, space=space, slo_margin=0.9,
                    deployment={"calibration": str(tmp_path / "p.yaml")})  # fmt: skip
    assert s.problem.constraints[0].value == pytest.approx(2000 / math.exp(1.2815516 * 0.5))


def test_a_bad_slo_margin_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^slo_margin: got 'p20'; allowed: a quantile"):
        fakes.study(tmp_path, slo_margin="p20")
    with pytest.raises(ConfigError, match=r"^deployment.calibration: got '.*nope.yaml'"):
        fakes.study(tmp_path, slo_margin="p90", deployment={"calibration": "nope.yaml"})
