"""One driver per study (the lease), resume of a finished study, counts that agree."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from rich.console import Console

from search.cli import main
from search.cli.study.report import study_summary
from search.cli.study.tune import print_outcome
from search.results.counts import trial_counts
from search.results.tables import studies_table
from search.run.driver import run_study
from search.store import lease as lease_mod
from search.store.lease import LEASE_KEY, Holder, Lease, LeaseLostError, StudyLockedError
from search.store.open import open_storage
from search.store.record import StudyRecord
from search.study.space import Params
from search.study.study_file import StudyFile
from tests.unit.search import fakes

ROOT = Path(__file__).resolve().parents[3]
TS = optuna.trial.TrialState
WORKLOAD = {
    "requests": 20,
    "arrival": {"process": "poisson", "rate_rps": 10},
    "input_tokens": {"dist": "uniform", "low": 50, "high": 100},
    "output_tokens": {"dist": "uniform", "low": 10, "high": 20},
    "seed": 0,
}
LOST: Params = {
    "tp": 2,
    "router": "kv_aware",
    "kv_router.overlap_weight": 2.0,
    "engine.max_num_seqs": 100,
    "engine.enable_prefix_caching": False,
}


def make(tmp_path: Path, **fields: Any) -> StudyFile:
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(WORKLOAD))
    fields.setdefault("optimizer", {"name": "random"})
    fields.setdefault("budget", {"max_trials": 4})
    sf: StudyFile = fakes.study(tmp_path, workload={"file": "w.yaml"}, **fields)
    return sf


def run(sf: StudyFile, **kw: Any) -> Any:
    return run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate, **kw)


def record(sf: StudyFile) -> StudyRecord:
    return StudyRecord(open_storage(sf.storage), sf.name, url=sf.storage)


def states(sf: StudyFile) -> list[TS]:
    return [t.state for t in record(sf).trials()]


def test_second_driver_refuses_and_names_the_holder(tmp_path: Path) -> None:
    sf = make(tmp_path)
    run(sf)
    rec = record(sf)
    with Lease.acquire(rec) as held:
        with pytest.raises(StudyLockedError) as info:
            run(make(tmp_path, budget={"max_trials": 8}), resume=True)
        message = str(info.value)
        assert "\n" not in message
        assert f"{socket.gethostname()}:{os.getpid()}" in message
        assert held.holder.token in message
        assert "since" in message
        assert "expires" in message
        with pytest.raises(StudyLockedError, match=held.holder.token):
            run(sf)  # `tune` of the same name: held, so it says by whom
    assert states(sf) == [TS.COMPLETE] * 4  # the refused driver failed nothing
    assert rec.system_attr(LEASE_KEY) is None  # released on exit
    state = run(make(tmp_path, budget={"max_trials": 6}), resume=True)
    assert state.n_trials == 6


def test_two_processes_one_refuses_and_ctrl_c_releases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sf = make(tmp_path, budget={"max_trials": 400}, executor={"kind": "local"})
    study = tmp_path / "study.yaml"
    data = fakes.study_dict(tmp_path, **_file_fields(sf))
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    # The fake space has 96 distinct configs: at 0.25 s each the driver runs for ~25 s, far
    # longer than the refusal below takes even on a loaded machine, so the SIGINT always finds
    # it running (at 0.05 s it could converge and exit 0 first).
    env = {**os.environ, "FAKE_SIM_SLEEP": "0.25", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "search.cli", "tune", str(study), "--no-progress"]
    # SIGINT handled in this process while the child starts, so that the child gets it at its
    # default (a handler becomes the default across exec; "ignored" stays ignored): a suite
    # started in the background of a shell without job control (``.ci/run &``) inherits SIGINT
    # ignored, and Python keeps an ignored SIGINT ignored, so the Ctrl-C below would never
    # arrive (this test's only failures, in such runs on 2026-12-05)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        holder = _wait_for_holder(sf, proc, timeout_s=60)
        assert holder.pid == proc.pid
        capsys.readouterr()
        assert main(["resume", "t", "--storage", sf.storage, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert f"being driven by driver {holder.label} (token {holder.token}) since" in err
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rec = record(sf)
    assert rec.system_attr(LEASE_KEY) is None
    assert rec.user_attrs["status"] == "stopped"
    n = sum(s == TS.COMPLETE for s in states(sf))
    args = ["resume", "t", "--storage", sf.storage, "--n-trials", str(n + 2), "--no-progress"]
    assert main(args) == 0  # at once: the lease was released
    assert TS.RUNNING not in states(sf)
    assert sum(s == TS.COMPLETE for s in states(sf)) == n + 2


def _file_fields(sf: StudyFile) -> dict[str, Any]:
    return {
        "workload": {"file": "w.yaml"},
        "optimizer": {"name": "random"},
        "budget": {"max_trials": sf.budget.max_trials},
        "executor": {"kind": "local"},
    }


def _wait_for_holder(sf: StudyFile, proc: subprocess.Popen[bytes], timeout_s: float) -> Holder:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:
            rec = record(sf)
            holder = Holder.parse(rec.system_attr(LEASE_KEY))
        except (KeyError, ValueError):  # not created yet
            continue
        if holder is not None and any(s == TS.COMPLETE for s in states(sf)):
            return holder
    raise AssertionError("the first driver never took its lease")


def test_takeover_after_expiry_fails_the_dead_drivers_running_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sf = make(tmp_path)
    run(sf)
    rec = record(sf)
    rec.start(sf.problem.space, LOST, 0)  # the other driver was evaluating this
    now = time.time()
    other = Holder("elsewhere", 4242, "feedf00d", now - 60, now, ttl_s=1.0)
    rec.set_system_attr(LEASE_KEY, asdict(other))
    more = make(tmp_path, budget={"max_trials": 6})
    with pytest.raises(StudyLockedError, match=r"elsewhere:4242 \(token feedf00d\)"):
        run(more, resume=True)
    assert states(sf)[-1] == TS.RUNNING  # untouched while the lease is live
    time.sleep(1.2)
    capsys.readouterr()
    state = run(more, resume=True)
    assert (
        "taking over study 't' from driver elsewhere:4242 (no heartbeat" in capsys.readouterr().err
    )
    assert state.n_trials == 6
    ts = record(sf).trials()
    assert ts[4].state == TS.FAIL
    assert ts[5].params == LOST
    assert ts[5].state == TS.COMPLETE


def test_a_dead_process_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    sf = make(tmp_path)
    run(sf)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = time.time()
    gone = Holder(socket.gethostname(), dead.pid, "deadbeef", now, now, ttl_s=3600.0)
    record(sf).set_system_attr(LEASE_KEY, asdict(gone))
    assert gone.stale_reason() == f"process {dead.pid} is gone"
    assert run(make(tmp_path, budget={"max_trials": 5}), resume=True).n_trials == 5


def test_heartbeat_renews_and_a_takeover_stops_the_holder(tmp_path: Path) -> None:
    sf = make(tmp_path)
    run(sf)
    rec = record(sf)
    with Lease.acquire(rec, heartbeat_s=0.05):
        first = Holder.parse(rec.system_attr(LEASE_KEY))
        time.sleep(0.3)
        later = Holder.parse(rec.system_attr(LEASE_KEY))
        assert first is not None
        assert later is not None
        assert later.heartbeat > first.heartbeat  # the thread renews it
        assert (later.since, later.token) == (first.since, first.token)
    lease = Lease.acquire(rec, heartbeat_s=3600.0)  # renewed by hand below
    try:
        rec.set_attr("x", 1)  # the holder writes
        thief = Holder("elsewhere", 1, "0badc0de", time.time(), time.time(), 30.0)
        rec.set_system_attr(LEASE_KEY, asdict(thief))
        lease.renew()
        with pytest.raises(LeaseLostError, match="held by driver elsewhere:1"):
            rec.set_attr("x", 2)  # the guard stops every write of the driver
    finally:
        lease.release()
    assert Holder.parse(rec.system_attr(LEASE_KEY)) == thief  # not ours: left alone
    assert rec.user_attrs["x"] == 1


def test_lease_is_released_when_the_driver_raises(tmp_path: Path) -> None:
    sf = make(tmp_path)

    class Broken:
        capacity, in_flight = 1, 0

        def __init__(self, *_: object) -> None:
            pass

        def submit(self, tag: int, params: object, *, hint: object = None) -> None:
            raise RuntimeError("evaluator broke")

        def close(self) -> None:
            pass

    with pytest.raises(RuntimeError, match="evaluator broke"):
        run(sf, evaluator=Broken)
    assert record(sf).system_attr(LEASE_KEY) is None
    assert run(make(tmp_path, budget={"max_trials": 3}), resume=True).n_trials == 3


def test_resume_of_a_finished_study_runs_nothing_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    budget = {"max_trials": 500, "tol": 10.0, "patience": 2, "generation": 5}
    sf = make(tmp_path, budget=budget)
    assert run(sf).status == "converged"
    n = len(record(sf).trials())
    capsys.readouterr()
    assert main(["resume", "t", "--storage", sf.storage, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"study t converged (hypervolume plateau): {n} trials ({n} complete" in out
    assert f"nothing to run. Give --n-trials above {n} or --max-wall-s" in out
    assert main(["resume", "t", "--storage", sf.storage, "--n-trials", str(n)]) == 0
    assert f"--n-trials {n} is not above that" in capsys.readouterr().out
    assert len(record(sf).trials()) == n
    assert (
        main(["resume", "t", "--storage", sf.storage, "--n-trials", str(n + 3), "--no-progress"])
        == 0
    )
    assert len(record(sf).trials()) == n + 3
    assert "study t: budget" in capsys.readouterr().out
    assert main(["resume", "t", "--storage", sf.storage, "--no-progress"]) == 0
    assert "study t used its budget" in capsys.readouterr().out
    assert len(record(sf).trials()) == n + 3


def test_counts_agree_in_tune_studies_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    sf = make(tmp_path, budget={"max_trials": 6})
    state = run(sf)
    rec = record(sf)
    rec.start(sf.problem.space, LOST, 0)  # RUNNING
    lost = rec.start(sf.problem.space, {**LOST, "tp": 4}, 0)
    rec.fail(lost, "lost")  # FAIL
    ts = rec.trials()
    c = trial_counts(ts)
    assert (c.total, c.complete, c.running, c.failed) == (8, 6, 1, 1)
    assert c.feasible == sum(bool(t.user_attrs.get("feasible")) for t in ts)
    line = c.summary()
    assert line == f"8 trials (6 complete, 1 running, 1 failed), {c.feasible} feasible"

    print_outcome(sf, state)
    assert f"study t: budget; {line}, hypervolume" in capsys.readouterr().out
    study = optuna.load_study(study_name="t", storage=open_storage(sf.storage))
    assert f"study t: budget; {line}, hypervolume" in study_summary(study)
    console = Console(width=200, record=True)
    console.print(studies_table(sf.storage))
    assert re.search(rf"t +│ budget +│ +8 │ +6/1/1 │ +{c.feasible} │", console.export_text())


def test_studies_says_running_or_interrupted(tmp_path: Path) -> None:
    sf = make(tmp_path)
    run(sf)
    rec = record(sf)
    rec.set_attr("status", "running")  # a driver that died without a word
    console = Console(width=200, record=True)
    console.print(studies_table(sf.storage))
    assert "interrupted" in console.export_text()
    with Lease.acquire(rec):
        console.print(studies_table(sf.storage))
        assert f"running ({socket.gethostname()}:{os.getpid()})" in console.export_text()


def test_ttl_constant_is_what_a_new_lease_promises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The expiry is a module constant; the lease stores it, so readers use the holder's."""
    monkeypatch.setattr(lease_mod, "TTL_S", 12.5)
    sf = make(tmp_path)
    run(sf)
    rec = record(sf)
    with Lease.acquire(rec):
        holder = Holder.parse(rec.system_attr(LEASE_KEY))
        assert holder is not None
        assert holder.ttl_s == 12.5
