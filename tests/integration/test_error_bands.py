"""``dynosim simulate --error-bands``: each latency with the calibration profile's spread."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from search.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama8b_h200_vllm.yaml"


def test_simulate_reports_the_profile_band_and_takes_its_host_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p.yaml").write_text(
        "backends:\n  vllm:\n    host: {request_us: 30000}\n    sigma: {ttft: 0.25, tpot: 0.1}\n"
    )
    dep = yaml.safe_load(EXAMPLE.read_text())
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({**dep, "calibration": "p.yaml"}))
    (tmp_path / "w.yaml").write_text(yaml.safe_dump({
        "requests": 40, "arrival": {"process": "poisson", "rate_rps": 5},
        "input_tokens": {"dist": "fixed", "value": 500},
        "output_tokens": {"dist": "fixed", "value": 50}, "seed": 1,
    }))  # fmt: skip
    out = tmp_path / "m.json"
    code = main(["simulate", str(tmp_path / "d.yaml"), "--workload", str(tmp_path / "w.yaml"),
                 "--error-bands", "--json", str(out)])  # fmt: skip
    assert code == 0
    assert "+-1 sigma" in capsys.readouterr().out
    payload = json.loads(out.read_text())
    ttft = payload["error_bands"]["time_to_first_token"]
    assert ttft["sigma"] == 0.25
    assert ttft["avg_low"] == pytest.approx(ttft["avg"] * math.exp(-0.25))
    assert ttft["p90_high"] == pytest.approx(ttft["p90"] * math.exp(0.25))
    assert payload["error_bands"]["inter_token_latency"]["sigma"] == 0.1
    # the profile's host cost applies (the deployment sets none): every TTFT >= 30 ms
    assert payload["metrics"]["time_to_first_token"]["min"] >= 30.0
    assert payload["deployment"]["host"]["request_us"] == 30000.0


def test_a_missing_profile_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = yaml.safe_load(EXAMPLE.read_text())
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({**dep, "calibration": "gone.yaml"}))
    (tmp_path / "w.yaml").write_text(yaml.safe_dump({"requests": 2, "arrival": {
        "process": "poisson", "rate_rps": 5}, "input_tokens": {"dist": "fixed", "value": 5},
        "output_tokens": {"dist": "fixed", "value": 5}}))  # fmt: skip
    assert main(["simulate", str(tmp_path / "d.yaml"), "--workload", str(tmp_path / "w.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "calibration: got 'gone.yaml'; allowed: a readable profile YAML file" in err
