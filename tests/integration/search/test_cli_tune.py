"""``dynosim tune / resume / studies`` end to end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from search.cli import main
from search.store.open import open_storage
from tests.unit.search import fakes

ROOT = Path(__file__).resolve().parents[3]
WORKLOAD = {
    "requests": 40,
    "arrival": {"process": "poisson", "rate_rps": 20},
    "input_tokens": {"dist": "uniform", "low": 200, "high": 2000},
    "output_tokens": {"dist": "uniform", "low": 20, "high": 200},
    "prefix": {"groups": 4, "tokens": 1024},
    "seed": 0,
}
SPACE = {
    "knobs": {
        "tp": {"type": "choice", "values": [1, 2, 4, 8]},
        "router": {"type": "choice", "values": ["round_robin", "kv_aware"]},
        "kv_router.overlap_weight": {
            "type": "choice",
            "values": [0.5, 2.0],
            "when": {"router": "kv_aware"},
        },
        "engine.max_num_seqs": {"type": "int", "low": 8, "high": 256, "log": True},
        "engine.enable_prefix_caching": {"type": "choice", "values": [True, False]},
    }
}


def write_study(tmp_path: Path, **fields: object) -> Path:
    (tmp_path / "workload.yaml").write_text(yaml.safe_dump(WORKLOAD, sort_keys=False))
    data = fakes.study_dict(tmp_path, workload={"file": "workload.yaml"}, **fields)
    f = tmp_path / "study.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    return f


def count(storage: str, name: str = "t") -> dict[str, int]:
    ts = optuna.load_study(study_name=name, storage=open_storage(storage)).trials
    out = {s.name: 0 for s in optuna.trial.TrialState}
    for t in ts:
        out[t.state.name] += 1
    out["hashes"] = len({t.user_attrs.get("config_hash") for t in ts if t.state.name == "COMPLETE"})
    return out


@pytest.mark.ray
def test_tune_resume_studies_with_real_simulator_on_local_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("dynosim.simulation")
    storage = str(tmp_path / "runs" / "s.journal")
    f = write_study(
        tmp_path,
        space=SPACE,
        simulator=None,
        deployment={"timing": "roofline"},
        optimizer={"name": "optuna-nsga2", "population": 8},
        executor={"kind": "ray", "num_cpus": 2},
        budget={"max_trials": 24, "tol": 0.0, "patience": 100},
    )
    assert main(["tune", str(f), "--storage", storage, "--name", "e2e", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "study e2e: budget; 24 trials" in out
    assert "Pareto front" in out
    ts = optuna.load_study(study_name="e2e", storage=open_storage(storage)).trials
    assert len(ts) == 24
    metrics = [t.user_attrs["metrics"] for t in ts if t.user_attrs["metrics"]]
    assert metrics
    assert all(m["completed_requests"] > 0 for m in metrics)
    args = ["resume", "e2e", "--storage", storage, "--n-trials", "28", "--executor", "local"]
    assert main([*args, "--no-progress"]) == 0
    assert count(storage, "e2e")["COMPLETE"] == 28
    assert count(storage, "e2e")["hashes"] == 28
    capsys.readouterr()
    assert main(["studies", "--storage", storage]) == 0
    assert "e2e" in capsys.readouterr().out


def test_resume_after_sigkill_loses_and_repeats_nothing(tmp_path: Path) -> None:
    storage = str(tmp_path / "s.journal")
    f = write_study(
        tmp_path,
        optimizer={"name": "pymoo-nsga2", "population": 6},
        budget={"max_trials": 60, "tol": 0.0, "patience": 100},
    )
    env = {**os.environ, "FAKE_SIM_SLEEP": "0.05", "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "search.cli",
        "tune",
        str(f),
        "--storage",
        storage,
        "--executor",
        "local",
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.2)
            try:
                now = count(storage)
                if now["COMPLETE"] >= 8 and now["RUNNING"] == 1:  # kill mid-evaluation
                    break
            except KeyError:  # study not created yet
                continue
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    before = count(storage)
    assert 8 <= before["COMPLETE"] < 60
    # the kill lands mid-evaluation almost always; between two trials it is 0 (still no loss)
    assert before["RUNNING"] in (0, 1)
    kept = optuna.load_study(study_name="t", storage=open_storage(storage)).trials
    done = [(t.number, t.params, t.values) for t in kept if t.state.name == "COMPLETE"]
    assert main(["resume", "t", "--storage", storage, "--no-progress"]) == 0
    after = count(storage)
    assert after["COMPLETE"] == 60
    assert after["hashes"] == 60
    assert after["FAIL"] == before["RUNNING"]  # a trial left running is failed and re-queued
    assert after["RUNNING"] == 0
    trials = optuna.load_study(study_name="t", storage=open_storage(storage)).trials
    assert [
        (t.number, t.params, t.values) for t in trials if t.number in {d[0] for d in done}
    ] == done


def test_bad_study_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write_study(tmp_path, budget={"max_trails": 3})
    assert main(["tune", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "budget.max_trails" in err
    assert str(f) in err
