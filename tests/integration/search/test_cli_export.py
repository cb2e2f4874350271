"""``dynosim export`` end to end over a journal storage holding hand-made trials."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from dynosim.config import DeploymentConfig
from search.cli import main

optuna.logging.set_verbosity(optuna.logging.WARNING)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TTFT = "time_to_first_token.p90"


def _config(**fields: Any) -> dict[str, Any]:
    return DeploymentConfig.from_dict({"model": MODEL, "gpu": "h200_sxm", **fields}).to_dict()


def make_storage(tmp_path: Path) -> str:
    """Study ``demo``: #0 feasible vLLM, #1 infeasible trtllm, #2 failed (no config)."""
    journal = str(tmp_path / "s.journal")
    storage = optuna.storages.JournalStorage(JournalFileBackend(journal))
    study = optuna.create_study(study_name="demo", storage=storage, directions=["maximize"])
    workload = tmp_path / "w.yaml"
    workload.write_text(
        yaml.safe_dump(
            {
                "requests": 300,
                "arrival": {"process": "poisson", "rate_rps": 4},
                "input_tokens": {"dist": "fixed", "value": 1000},
                "output_tokens": {"dist": "fixed", "value": 200},
            }
        )
    )
    study.set_user_attr(
        "study",
        {"name": "demo", "model": MODEL, "gpu": "h200_sxm", "workload": {"file": str(workload)},
         "load": {"mode": "capacity", "tolerance": 0.05}},
    )  # fmt: skip
    study.set_user_attr("objectives", [{"metric": "output_token_throughput_per_gpu",
                                        "direction": "maximize"}])  # fmt: skip
    study.set_user_attr("constraints", [{"metric": TTFT, "op": "<=", "value": 2000.0}])
    dist: dict[str, BaseDistribution] = {"tp": CategoricalDistribution([1, 2])}
    rows = [
        (_config(tp=2, workers=4, router="kv_aware"), 900.0, True, None),
        (_config(backend="trtllm", tp=1), 4100.0, False, f"SLO violated: {TTFT} <= 2000"),
    ]
    for cfg, ttft, feasible, reason in rows:
        metrics = {TTFT: ttft, "output_token_throughput_per_gpu": 1500.0, "load_level": 9.5}
        study.add_trial(
            optuna.trial.create_trial(
                params={"tp": cfg["tp"]},
                distributions=dist,
                values=[1500.0],
                user_attrs={"config": cfg, "metrics": metrics, "feasible": feasible,
                            "infeasible_reason": reason},
                system_attrs={"constraints": [(ttft - 2000.0) / 2000.0]},
            )
        )  # fmt: skip
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL, params={"tp": 1},
                                              distributions=dist))  # fmt: skip
    return journal


def test_export_text_json_and_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = make_storage(tmp_path)
    assert main(["export", "demo", "--trial", "0", "--storage", journal]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# dynosim export: study demo, trial #0 (feasible)")
    assert text.count("vllm serve meta-llama/Llama-3.1-8B-Instruct") == 4
    assert "python -m dynamo.frontend --http-port 8000 --router-mode kv" in text
    assert "--request-rate 9.5 --arrival-pattern poisson" in text
    assert "--isl 1000" in text

    out = tmp_path / "cmds"
    argv = ["export", "demo", "--trial", "1", "--storage", journal, "--format", "json"]
    assert main([*argv, "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["feasible"] is False
    assert "INFEASIBLE" in data["header"][0]
    path = Path(data["trtllm_yaml_path"])
    assert path == out / "trtllm-demo-trial1.yaml"
    assert data["files"] == [str(path)]
    options = yaml.safe_load(path.read_text())
    assert set(options["kv_cache_config"]) >= {"enable_block_reuse", "tokens_per_block"}
    serve = data["engine"]["commands"][0]["argv"]
    assert serve[:2] == ["trtllm-serve", MODEL]
    assert serve[serve.index("--extra_llm_api_options") + 1] == str(path)
    assert data["router"] is None


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["export", "demo", "--trial", "7"], "no trial #7 (trials: 0-2)"),
        (["export", "demo", "--trial", "2"], "stores no configuration (state FAIL)"),
        (["export", "nope", "--trial", "0"], "no study 'nope'"),
    ],
)
def test_export_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    journal = make_storage(tmp_path)
    assert main([*argv, "--storage", journal]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("dynosim export: error: ")
    assert needle in captured.err


def test_export_missing_storage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "none.journal")
    assert main(["export", "demo", "--trial", "0", "--storage", missing]) == 2
    assert "no storage file" in capsys.readouterr().err
    assert not Path(missing).exists()


def test_aiperf_trace_and_load_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 20: the check at a chosen load and at capacity, on the trace AIPerf replays."""
    journal = make_storage(tmp_path)
    out = tmp_path / "replay" / "w.jsonl"
    argv = ["export", "demo", "--trial", "0", "--storage", journal, "--format", "json"]
    assert main([*argv, "--load", "6", "--aiperf-trace", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 300  # the study's 300 generated requests, as generated
    assert all((r["input_length"], r["output_length"]) == (1000, 200) for r in rows)
    times = [r["timestamp"] for r in rows]
    assert times == sorted(times)
    assert 300 / 4 * 0.8 < times[-1] / 1000 < 300 / 4 * 1.2  # poisson at 4 req/s
    chosen = data["aiperf"]["commands"][0]["argv"]
    at_capacity = data["capacity_check"]["commands"][0]["argv"]
    for check in (chosen, at_capacity):
        assert check[check.index("--input-file") + 1] == str(out)
        assert check[check.index("--custom-dataset-type") + 1] == "mooncake_trace"
    assert chosen[chosen.index("--request-rate") + 1] == "6"
    assert at_capacity[at_capacity.index("--request-rate") + 1] == "9.5"
    assert "chosen load" in data["aiperf"]["title"]
    assert "capacity" in data["capacity_check"]["title"]

    # without --load the first check is at the workload's own rate
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    own = data["aiperf"]["commands"][0]["argv"]
    assert own[own.index("--request-rate") + 1] == "4"
    assert main([*argv, "--load", "-1"]) == 2
    assert "--load: got -1.0; allowed: a number > 0" in capsys.readouterr().err
