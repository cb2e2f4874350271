"""Real faults: a full filesystem during ``tune``, SIGKILL at several moments, two drivers at once.

The full disk is a small tmpfs the test mounts (CI runs as root) and unmounts; the kills are
SIGKILL to a ``dynosim tune`` process group at the moment named by each test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from search.cli import main
from search.store.backend import TAG, HolderLock
from search.store.lease import LEASE_KEY
from search.store.open import open_storage
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


def study_file(tmp_path: Path, storage: Path, max_trials: int) -> Path:
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(WORKLOAD))
    data = fakes.study_dict(
        tmp_path,
        workload={"file": str(tmp_path / "w.yaml")},
        optimizer={"name": "random"},
        budget={"max_trials": max_trials, "tol": 0.0, "patience": 1000},
        storage=str(storage),
    )
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def start(args: list[str], sleep_s: float = 0.0) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FAKE_SIM_SLEEP": str(sleep_s), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "search.cli", *args, "--no-progress"]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the kill takes its forked evaluators too
    )


def trials(storage: Path) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="t", storage=open_storage(str(storage), create=False))
    return study.get_trials(deepcopy=False)


def completed(storage: Path) -> list[tuple[int, dict[str, Any], list[float]]]:
    return [(t.number, t.params, list(t.values)) for t in trials(storage) if t.state == TS.COMPLETE]


def kill_when(
    proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout_s: float = 60
) -> None:
    """SIGKILL the process group as soon as ``ready()`` holds."""
    deadline = time.monotonic() + timeout_s
    try:
        while not ready():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the moment to kill never came"
            time.sleep(0.002)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def journal_has(storage: Path, needle: bytes) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return needle in storage.read_bytes()
        except FileNotFoundError:
            return False

    return ready


def n_complete_at_least(storage: Path, n: int) -> Callable[[], bool]:
    # op 6 is Optuna's SET_TRIAL_STATE_VALUES; state 1 is COMPLETE
    return lambda: journal_has(storage, b"")() and storage.read_bytes().count(b'"state":1') >= n


def resume(storage: Path, n: int, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    args = ["resume", "t", "--storage", str(storage), "--n-trials", str(n), "--no-progress"]
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 0, err
    return err


# -- a kill at several moments --------------------------------------------------------------


MOMENTS = {
    # the study's creation record is written (with its study file: one write)
    "created": lambda s: journal_has(s, b'"op_code":0,'),
    # the driver wrote its lease
    "leased": lambda s: journal_has(s, LEASE_KEY.encode()),
    # the first trial was started, none finished
    "first-trial": lambda s: journal_has(s, b'"op_code":4,'),
    # mid-study: three trials are complete
    "mid-study": lambda s: n_complete_at_least(s, 3),
}


@pytest.mark.parametrize("moment", MOMENTS)
def test_a_kill_at_any_moment_leaves_a_study_resume_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], moment: str
) -> None:
    storage = tmp_path / "s.journal"
    study = study_file(tmp_path, storage, max_trials=40)
    proc = start(["tune", str(study)], sleep_s=0.05)
    kill_when(proc, MOMENTS[moment](storage))
    before = completed(storage)
    assert trials(storage) is not None  # the study is there and loads
    err = resume(storage, len(before) + 3, capsys)
    assert "Traceback" not in err
    after = completed(storage)
    assert after[: len(before)] == before  # no completed trial lost or changed
    assert len(after) == len(before) + 3
    assert TS.RUNNING not in [t.state for t in trials(storage)]
    # and `tune` of the same name still says to resume (the study is a real one)
    capsys.readouterr()
    assert main(["tune", str(study), "--no-progress"]) == 2
    assert "use `dynosim resume` to continue" in capsys.readouterr().err


def test_two_resumes_right_after_a_kill_one_runs_one_refuses(tmp_path: Path) -> None:
    """The killed driver's lease is stale (its process is gone) but not expired: one takes it."""
    storage = tmp_path / "s.journal"
    study = study_file(tmp_path, storage, max_trials=40)
    kill_when(start(["tune", str(study)], sleep_s=0.05), n_complete_at_least(storage, 2))
    n = len(completed(storage)) + 6
    args = ["resume", "t", "--storage", str(storage), "--n-trials", str(n)]
    procs = [start(args, sleep_s=0.2) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read().decode() if p.stderr else "") for p in procs]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], results
    for _, err in results:
        assert "Traceback" not in err, err
    (refused,) = [err for rc, err in results if rc == 2]
    lines = refused.strip().splitlines()
    assert len(lines) == 1, refused
    assert "being driven by driver" in lines[0] or "another driver started it just now" in lines[0]
    assert len(completed(storage)) == n
    assert TS.RUNNING not in [t.state for t in trials(storage)]


def test_a_journal_lock_left_by_a_killed_process_is_broken_at_once(tmp_path: Path) -> None:
    path = tmp_path / "s.journal"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = Path(f"{path}.lock")
    os.symlink(f"{path}{TAG}{os.uname().nodename} {dead.pid}", lock)
    t0 = time.monotonic()
    holder = HolderLock(str(path))
    assert holder.acquire()
    assert time.monotonic() - t0 < 1.0  # not Optuna's 30 s grace period
    assert str(os.getpid()) in os.readlink(lock)
    holder.release()
    assert not lock.exists()


def test_a_lock_this_process_orphaned_is_broken_at_once(tmp_path: Path) -> None:
    """A Ctrl-C between making the link and the caller's ``try`` leaves a lock naming this very
    process that no thread of it holds: the next acquire breaks it at once (it used to wait out
    the 30 s grace period, and a driver's "stopped" write with it; the Ctrl-C test's flake)."""
    path = tmp_path / "s.journal"
    lock = Path(f"{path}.lock")
    os.symlink(f"{path}{TAG}{os.uname().nodename} {os.getpid()}", lock)  # unregistered
    t0 = time.monotonic()
    holder = HolderLock(str(path))
    assert holder.acquire()
    assert time.monotonic() - t0 < 1.0
    # held by a thread of this process now: another of its threads waits, it does not break it
    waiter = HolderLock(str(path))
    t = threading.Thread(target=waiter.acquire, daemon=True)
    t.start()
    t.join(0.5)
    assert t.is_alive()
    holder.release()
    t.join(5.0)
    assert not t.is_alive()
    waiter.release()
    assert not lock.exists()


def test_a_lock_of_a_live_process_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "s.journal"
    first = HolderLock(str(path))
    first.acquire()
    other = subprocess.run(
        [sys.executable, "-c",
         "import sys; from search.store.backend import HolderLock; "
         f"l = HolderLock({str(path)!r}); import threading; "
         "t = threading.Thread(target=l.acquire, daemon=True); t.start(); t.join(1.0); "
         "sys.exit(3 if t.is_alive() else 0)"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False,
    )  # fmt: skip
    first.release()
    assert other.returncode == 3  # still waiting after 1 s: the holder (this process) lives


# -- a full disk ----------------------------------------------------------------------------


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A 1 MiB tmpfs, mounted for the test and removed after it."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command: cannot make a filesystem fill up")
    where = Path(tempfile.mkdtemp(prefix="dynosim-fullfs-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        where.rmdir()
        pytest.skip(f"mounting a tmpfs is not permitted here ({done.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def fill(fs: Path, leave: int) -> Path:
    """Fill ``fs`` but ``leave`` bytes; returns the filler file."""
    filler = fs / "filler"
    free = shutil.disk_usage(fs).free
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


def test_a_full_disk_during_tune_is_one_line_and_resume_finishes(
    tmp_path: Path, small_fs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = small_fs / "s.journal"
    study = study_file(tmp_path, storage, max_trials=200)
    filler = fill(small_fs, leave=48 * 1024)
    proc = start(["tune", str(study)])
    assert proc.wait(timeout=120) == 2
    err = proc.stderr.read().decode() if proc.stderr else ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith("dynosim tune: error: storage ")
    assert str(storage) in line  # where
    assert "No space left on device" in line  # what
    assert f"dynosim resume t --storage {storage}" in line  # how to resume
    data = storage.read_bytes()
    assert data.endswith(b"\n")  # the failed write left no torn line
    before = completed(storage)
    assert 1 <= len(before) < 200
    filler.unlink()  # space is freed
    err = resume(storage, len(before) + 5, capsys)
    assert "torn" not in err  # nothing to repair
    after = completed(storage)
    assert after[: len(before)] == before
    assert len(after) == len(before) + 5


def test_a_disk_full_before_the_study_exists_leaves_nothing(
    tmp_path: Path, small_fs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = small_fs / "s.journal"
    study = study_file(tmp_path, storage, max_trials=3)
    filler = fill(small_fs, leave=0)
    capsys.readouterr()
    assert main(["tune", str(study), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "No space left on device" in err
    assert not storage.exists()  # no empty or half-written journal
    filler.unlink()
    assert main(["tune", str(study), "--no-progress"]) == 0
    assert len(completed(storage)) == 3


# -- a creation interrupted where it is not one write (SQLite, a database server) ------------


def test_a_study_whose_creation_was_interrupted_is_started_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kill between creating the study and storing its study file (not one write in SQLite)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = study_file(tmp_path, tmp_path / "unused.journal", max_trials=3)
    open_storage(url).create_new_study([optuna.study.StudyDirection.MAXIMIZE] * 2, "t")
    capsys.readouterr()
    assert main(["resume", "t", "--storage", url, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "was interrupted while it was being created" in err
    assert f"dynosim tune STUDY.yaml --name t --storage {url}" in err
    assert main(["tune", str(study), "--storage", url, "--no-progress"]) == 0
    assert "creating it again" in capsys.readouterr().err
    st = optuna.load_study(study_name="t", storage=open_storage(url, create=False))
    assert sum(t.state == TS.COMPLETE for t in st.trials) == 3
    assert isinstance(st.user_attrs["study"], dict)


def test_two_tunes_of_one_new_study_at_once_one_runs_one_refuses(tmp_path: Path) -> None:
    storage = tmp_path / "s.journal"
    study = study_file(tmp_path, storage, max_trials=6)
    procs = [start(["tune", str(study)], sleep_s=0.2) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read().decode() if p.stderr else "") for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2], results
    (refused,) = [err for rc, err in results if rc == 2]
    lines = refused.strip().splitlines()
    assert len(lines) == 1, refused
    assert "Traceback" not in refused
    assert len(completed(storage)) == 6
    assert storage.read_bytes().count(b'"op_code":0,') == 1  # one study created
