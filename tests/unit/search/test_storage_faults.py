"""Storage faults: a torn journal line, a locked SQLite database."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import optuna
import pytest

from search.cli import main
from search.run.driver import run_study
from search.store import open as storage_mod
from search.store.journal import repair_journal
from search.store.open import open_storage
from search.store.record import StorageUnavailableError, StudyRecord
from tests.unit.search import fakes

TORN = b'{"op_code":5,"worker_id":"abc","trial_id":3,"us'
WORKLOAD = """\
requests: 20
arrival: {process: poisson, rate_rps: 10}
input_tokens: {dist: uniform, low: 50, high: 100}
output_tokens: {dist: uniform, low: 10, high: 20}
seed: 0
"""


def tune(tmp_path: Path, n: int = 4, **fields: object) -> str:
    """A finished study of ``n`` trials; returns its storage URL."""
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    sf = fakes.study(
        tmp_path,
        optimizer={"name": "random"},
        budget={"max_trials": n},
        workload={"file": "w.yaml"},
        **fields,
    )
    run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate)
    return str(sf.storage)


def n_complete(url: str) -> int:
    ts = optuna.load_study(study_name="t", storage=open_storage(url)).trials
    return sum(t.state == optuna.trial.TrialState.COMPLETE for t in ts)


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".torn-*"))


@pytest.mark.parametrize("tail", [TORN, TORN + b"\n"])
def test_torn_last_line_is_repaired_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tail: bytes
) -> None:
    url = tune(tmp_path)
    path = Path(url)
    good = path.read_bytes()
    with path.open("ab") as f:
        f.write(tail)
    capsys.readouterr()
    assert main(["studies", "--storage", url]) == 0
    captured = capsys.readouterr()
    warning = captured.err.strip().splitlines()
    assert len(warning) == 1
    assert "torn" in warning[0]
    assert "warning" in warning[0]
    assert " t " in captured.out or "│ t " in captured.out
    assert path.read_bytes() == good
    [backup] = backups(path)
    assert backup.read_bytes() == good + tail
    assert main(["studies", "--storage", url]) == 0  # repaired once: no second warning
    assert capsys.readouterr().err == ""


def test_resume_after_a_torn_line_finishes_the_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = tune(tmp_path)
    with Path(url).open("ab") as f:
        f.write(TORN)
    assert main(["resume", "t", "--storage", url, "--n-trials", "7", "--no-progress"]) == 0
    assert "torn" in capsys.readouterr().err
    assert n_complete(url) == 7


def test_a_torn_line_written_over_is_recovered(tmp_path: Path) -> None:
    """What an unrepaired resume left: a torn write, then records appended to it."""
    url = tune(tmp_path)
    path = Path(url)
    lines = path.read_bytes().splitlines(keepends=True)
    glued = b"".join(lines[:-3]) + TORN + b"".join(lines[-3:])
    path.write_bytes(glued)
    with pytest.raises(ValueError, match=r"Expecting|Invalid"):  # what Optuna alone does
        optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(url))
    assert n_complete(url) == 4
    assert path.read_bytes() == b"".join(lines)
    assert backups(path)


def test_an_unrepairable_journal_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = tune(tmp_path)
    path = Path(url)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]) + b"not json at all\n" + b"".join(lines[2:]))
    assert main(["studies", "--storage", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "line 3" in err


def test_an_intact_journal_is_left_alone(tmp_path: Path) -> None:
    path = Path(tune(tmp_path))
    before = path.read_bytes()
    assert not repair_journal(path, full=True)
    assert path.read_bytes() == before
    assert not backups(path)


def _hold_exclusive_lock(db: Path, seconds: float, held: threading.Event) -> None:
    con = sqlite3.connect(db, timeout=10, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    held.set()
    time.sleep(seconds)
    con.execute("COMMIT")
    con.close()


def test_sqlite_database_is_locked_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection holds an exclusive lock longer than SQLite's busy timeout."""
    monkeypatch.setattr(storage_mod, "SQLITE_TIMEOUT_S", 0.1)
    url = f"sqlite:///{tmp_path / 's.db'}"
    tune(tmp_path, storage=url)
    record = StudyRecord(open_storage(url), "t", url=url)
    held = threading.Event()
    locker = threading.Thread(target=_hold_exclusive_lock, args=(tmp_path / "s.db", 1.0, held))
    locker.start()
    assert held.wait(5)
    start = time.monotonic()
    record.set_attr("note", "written while locked")
    waited = time.monotonic() - start
    locker.join()
    assert waited > 0.5  # it did wait for the lock (busy timeout alone gives up at 0.1 s)
    assert record.user_attrs["note"] == "written while locked"


def test_sqlite_locked_without_retries_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: with the retries cut to nothing the same write fails, as one line."""
    monkeypatch.setattr(storage_mod, "SQLITE_TIMEOUT_S", 0.1)
    monkeypatch.setattr(storage_mod, "LOCKED_RETRY_S", 0.0)
    url = f"sqlite:///{tmp_path / 's.db'}"
    tune(tmp_path, storage=url)
    record = StudyRecord(open_storage(url), "t", url=url)
    held = threading.Event()
    locker = threading.Thread(target=_hold_exclusive_lock, args=(tmp_path / "s.db", 1.0, held))
    locker.start()
    assert held.wait(5)
    try:
        with pytest.raises(StorageUnavailableError, match="database is locked"):
            record.set_attr("note", "x")
    finally:
        locker.join()


def test_a_write_past_the_file_size_limit_is_rolled_back(tmp_path: Path) -> None:
    """A real short write (RLIMIT_FSIZE -> EFBIG, like ENOSPC) leaves the journal as it was."""
    import resource
    import signal

    url = tune(tmp_path, n=2)
    path = Path(url)
    good = path.read_bytes()
    storage = open_storage(url)
    study_id = storage.get_study_id_from_name("t")
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(good) + 40, limits[1]))
    try:
        with pytest.raises(OSError, match="File too large"):
            storage.set_study_user_attr(study_id, "big", "x" * 1000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert path.read_bytes() == good  # the 40 bytes that fitted were taken back
    assert "big" not in open_storage(url).get_study_user_attrs(study_id)
    assert n_complete(url) == 2
