"""Never modify a foreign file: every command that takes ``--storage`` refuses one untouched."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from dynosim.errors import DynosimError
from search.cli import main
from search.store.journal import NotStorageError, check_journal, repair_journal
from search.store.open import open_storage
from tests.unit.search import fakes

FOREIGN = {
    "csv": b"concurrency,ttft_ms,itl_ms\n1,20.5,3.1\n8,41.0,4.2\n",
    "empty": b"",
    "binary": bytes(range(256)) * 8,
    "json-lines": b'{"a": 1}\n{"b": 2}\n',  # JSON, but not a journal record
}
WORKLOAD = {
    "requests": 20,
    "arrival": {"process": "poisson", "rate_rps": 10},
    "input_tokens": {"dist": "uniform", "low": 50, "high": 100},
    "output_tokens": {"dist": "uniform", "low": 10, "high": 20},
    "seed": 0,
}
COMMANDS = ["tune", "resume", "report", "studies", "export"]


def _argv(command: str, study: Path, storage: str) -> list[str]:
    return {
        "tune": ["tune", str(study), "--storage", storage, "--no-progress"],
        "resume": ["resume", "t", "--storage", storage, "--no-progress"],
        "report": ["report", "t", "--storage", storage, "--out", str(study.parent / "r")],
        "studies": ["studies", "--storage", storage],
        "export": ["export", "t", "--trial", "0", "--storage", storage],
    }[command]


def _study_file(tmp_path: Path) -> Path:
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(WORKLOAD))
    data = fakes.study_dict(tmp_path, workload={"file": "w.yaml"}, budget={"max_trials": 2})
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    return study


def _assert_untouched(path: Path, before: bytes, mtime: int) -> None:
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime
    siblings = sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "."))
    assert siblings == []  # no .torn backup, no .lock, no .repair


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", ["study-yaml", *FOREIGN])
@pytest.mark.parametrize("scheme", ["", "sqlite:///"])
def test_a_foreign_file_is_refused_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, kind: str, scheme: str
) -> None:
    study = _study_file(tmp_path)
    if kind == "study-yaml":
        target = study  # the study YAML given as its own storage
    else:
        target = tmp_path / f"data.{kind}"
        target.write_bytes(FOREIGN[kind])
    if scheme and kind == "empty" and command == "tune":
        pytest.skip("SQLite takes an empty file as an empty database (SQLite file format)")
    old = time.time() - 3600  # an mtime a write would visibly change
    os.utime(target, (old, old))
    before, mtime = target.read_bytes(), target.stat().st_mtime_ns
    capsys.readouterr()
    assert main(_argv(command, study, scheme + str(target))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert "not a dynosim study storage" in err, err
    assert str(target) in err
    _assert_untouched(target, before, mtime)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotStorageError, match="is not a regular file"):
        open_storage(str(tmp_path))


def test_a_journal_with_a_foreign_line_is_not_repaired(tmp_path: Path) -> None:
    """A torn tail is repaired only when every other line is a journal record."""
    path = tmp_path / "s.journal"
    open_storage(str(path)).create_new_study([], "t")  # a real journal of one record
    record = path.read_bytes()
    data = record + b"name: t\n" + record + b'{"op_code":4,"wor'
    path.write_bytes(data)
    mtime = path.stat().st_mtime_ns
    check_journal(path)  # starts and ends like a journal: recognised ...
    with pytest.raises(NotStorageError, match="line 2 is not a journal record"):
        repair_journal(path, full=False)  # ... but the repair reads every line first
    with pytest.raises(DynosimError):
        open_storage(str(path))
    _assert_untouched(path, data, mtime)


def test_a_repair_keeps_the_original_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "s.journal"
    open_storage(str(path)).create_new_study([], "t")
    good = path.read_bytes()
    torn = good + b'{"op_code":4,"worker_id":"x","study_id":0,"datetime_st'
    path.write_bytes(torn)
    assert repair_journal(path, full=False)
    assert path.read_bytes() == good
    (backup,) = tmp_path.glob("s.journal.torn-*")
    assert backup.read_bytes() == torn


def test_a_new_journal_is_never_empty(tmp_path: Path) -> None:
    """Opening creates no file: the first write does, so an empty file is never ours."""
    path = tmp_path / "new" / "s.journal"
    storage = open_storage(str(path))
    assert not path.exists()
    assert storage.get_all_studies() == []
    storage.create_new_study([], "t")
    assert path.read_bytes().startswith(b'{"op_code":0,')
