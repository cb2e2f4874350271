"""``dynosim recommend``: a quick capacity study written as an ordinary, resumable study."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from search.cli import main
from search.cli.study.recommend import standard_space
from search.store.open import load_study
from search.store.schema import is_feasible

MODEL = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h200_sxm"]


def test_one_gpu_has_no_disaggregation_and_tp_fits_the_budget() -> None:
    one = standard_space(1)["knobs"]
    assert "mode" not in one
    assert one["tp"]["values"] == [1]
    six = standard_space(6)["knobs"]
    assert six["tp"]["values"] == [1, 2, 4]
    assert six["prefill.workers"]["high"] == 5  # the other pool keeps at least one GPU


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gpus", "0", "--isl", "10", "--osl", "10"], "--gpus: got 0"),
        (["--gpus", "2", "--isl", "10"], "--osl: got None; allowed: --isl and --osl together"),
        (["--gpus", "2", "--trace", "no/such.jsonl"], "--trace: got 'no/such.jsonl'"),
    ],
)
def test_bad_flags_are_one_line_before_anything_runs(
    flags: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    argv = ["recommend", *MODEL, *flags, "--ttft-ms", "500", "--itl-ms", "50"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # nothing written


def test_recommend_runs_a_stored_study_and_exports_its_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    storage = str(tmp_path / "s.journal")
    argv = [
        "recommend", *MODEL, "--gpus", "2", "--isl", "512", "--osl", "64",
        "--ttft-ms", "2000", "--itl-ms", "100", "--requests", "40", "--trials", "3",
        "--executor", "local", "--storage", storage, "--name", "rec", "--no-progress",
    ]  # fmt: skip
    code = main(argv)
    out = capsys.readouterr().out
    study_file = tmp_path / "runs/recommend/rec.yaml"
    data = yaml.safe_load(study_file.read_text())
    assert data["constraints"] == [
        "time_to_first_token.p90 <= 2000",
        "inter_token_latency.p90 <= 100",
    ]
    assert data["load"]["mode"] == "capacity"
    study = load_study(storage, "rec")
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 3
    feasible = [t for t in trials if is_feasible(t)]
    if feasible:
        best = max(feasible, key=lambda t: (t.values[0], t.values[1], -t.number))
        assert code == 0
        assert f"=== recommendation 1: trial #{best.number} ===" in out
        assert "aiperf profile" in out
    else:
        assert code == 1
        assert "no configuration met the SLOs" in out
