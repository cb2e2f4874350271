"""Messages that help (issue 20): a trace as --workload, SLOs written in seconds, Ctrl-C."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from search.cli import main
from search.cli.shared import slo_unit_warnings, study_unit_warnings
from tests.unit.search import fakes

ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENT = ROOT / "examples" / "llama8b_h200_vllm.yaml"


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "looks_like_yaml.yaml"])
def test_a_trace_given_as_workload_says_use_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    trace = tmp_path / name
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n')
    assert main(["simulate", str(DEPLOYMENT), "--workload", str(trace)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"use --trace {trace}" in err
    assert "input_length" not in err  # not the file's first bytes


def test_slo_in_seconds_is_one_warning_line_each() -> None:
    lines = slo_unit_warnings({"slo.ttft_ms": 2, "slo.itl_ms": 0.05, "slo.e2e_ms": 1,
                               "constraint time_to_first_token.p90 <= 2000": 2000.0})  # fmt: skip
    assert lines == [
        "slo.ttft_ms = 2 ms is below 5 ms, which LLM deployments rarely reach: was it meant "
        "in seconds (2 s = 2000 ms)?",
        "slo.itl_ms = 0.05 ms is below 1 ms, which LLM deployments rarely reach: was it meant "
        "in seconds (0.05 s = 50 ms)?",
    ]
    assert slo_unit_warnings({"slo.ttft_ms": 5, "slo.itl_ms": 1}) == []  # the floors are fine


def test_simulate_and_tune_warn_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = yaml.safe_load(DEPLOYMENT.read_text())
    d["slo"] = {"ttft_ms": 2, "itl_ms": 50}
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(d))
    w = {"requests": 5, "arrival": {"process": "poisson", "rate_rps": 5},
         "input_tokens": {"dist": "fixed", "value": 100},
         "output_tokens": {"dist": "fixed", "value": 5}}  # fmt: skip
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(w))
    assert main(["simulate", str(tmp_path / "d.yaml"), "--workload", str(tmp_path / "w.yaml")]) == 0
    err = capsys.readouterr().err
    assert "dynosim simulate: warning: slo.ttft_ms = 2 ms is below 5 ms" in err
    assert "itl" not in err

    study = fakes.study_dict(tmp_path, workload={"file": "w.yaml"},
                             constraints=["time_to_first_token.p90 <= 3"])  # fmt: skip
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    (line,) = study_unit_warnings(tmp_path / "s.yaml")
    assert line.startswith("constraint time_to_first_token.p90 <= 3 = 3 ms is below 5 ms")


def test_ctrl_c_prints_the_exact_resume_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from search.cli.study import tune
    from search.run import driver

    def interrupted_after_two(*args: object, **kw: object) -> object:
        def progress(state: driver.RunState) -> None:
            if state.n_trials >= 2:
                raise KeyboardInterrupt

        return driver.run_study(*args, **{**kw, "progress": progress})  # type: ignore[arg-type]

    monkeypatch.setattr(tune, "run_study", interrupted_after_two)
    monkeypatch.setattr("sys.argv", [".venv/bin/dynosim"])
    w = {"requests": 5, "arrival": {"process": "poisson", "rate_rps": 5},
         "input_tokens": {"dist": "fixed", "value": 100},
         "output_tokens": {"dist": "fixed", "value": 5}}  # fmt: skip
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(w))
    study = fakes.study_dict(tmp_path, workload={"file": "w.yaml"}, optimizer={"name": "grid"})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    assert main(["tune", str(tmp_path / "s.yaml"), "--no-progress"]) == 130
    err = capsys.readouterr().err.strip()
    storage = study["storage"]
    hint = f"continue with: .venv/bin/dynosim resume t --storage {storage}"
    assert err == f"dynosim tune: interrupted; {hint}"
    monkeypatch.undo()  # and that command continues the study
    assert main(["resume", "t", "--storage", storage, "--no-progress"]) == 0
    assert "24 trials" in capsys.readouterr().out
