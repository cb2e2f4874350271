"""Recognising an Optuna journal file, and repairing one a crash mid-write left torn.

Optuna's ``JournalFileBackend`` appends one JSON record a line, under a lock file. A crash
mid-write (on a filesystem without atomic appends) leaves a torn last line: Optuna skips it when
reading, but the next record is appended to it, and from then on every read of the file fails.
:func:`check_journal` runs first when ``search.store.open`` opens a journal: a file that is not
one (a study YAML, a CSV, an empty or binary file) is refused before anything reads its lock or
writes; :func:`repair_journal` then runs, and touches only a file whose every intact line is a
journal record.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from dynosim.errors import ConfigError, DynosimError

JOURNAL_OP_CODE = b'{"op_code":'
"""How every line of Optuna's journal starts (``json.dumps`` with compact separators)."""
STORAGES = "an Optuna journal file written by dynosim, sqlite:///FILE or a database URL"


class NotStorageError(ConfigError):
    """A ``--storage`` path names a file that is not a study storage: it is left untouched."""

    def __init__(self, where: str, why: str) -> None:
        self.field, self.value, self.allowed = "--storage", where, STORAGES
        message = f"not a dynosim study storage: {where} {why}; allowed: {STORAGES}"
        DynosimError.__init__(self, message)  # not ConfigError's FIELD: got VALUE wording


def check_journal(path: Path) -> None:
    """Raise unless ``path`` is missing or starts and ends like an Optuna journal (reads only).

    Raises:
        NotStorageError: A directory, an empty file, or a file whose first or last line is not
            a journal record (a torn last line that is the start of one is accepted).
    """
    if not path.exists():
        return
    if not path.is_file():
        raise NotStorageError(str(path), "is not a regular file")
    try:
        with path.open("rb") as f:
            head = f.read(1 << 16)
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - (1 << 16)))
            tail = f.read()
    except OSError as exc:
        raise NotStorageError(str(path), f"cannot be read ({exc.strerror or exc})") from None
    if not head:
        raise NotStorageError(str(path), "is empty (dynosim never leaves a journal empty)")
    first, newline, _ = head.partition(b"\n")
    if not head.startswith(JOURNAL_OP_CODE) or (newline and not _line_ok(first + newline)):
        raise NotStorageError(str(path), f"does not start with a journal record ({head[:24]!r})")
    cut = tail.rfind(b"\n", 0, len(tail) - 1 if tail.endswith(b"\n") else len(tail))
    whole = cut >= 0 or size <= len(tail)  # else the last line is longer than the tail read
    if whole and not _line_ok(tail[cut + 1 :]):
        raise NotStorageError(str(path), "does not end with a journal record")


def repair_journal(path: Path, *, full: bool) -> bool:
    """Repair a journal file that a crash mid-write left with a torn line; True if repaired.

    Without ``full`` only a file whose last line is torn is looked at. Every line is then
    checked before anything is written: a torn last line (the start of a record) is cut off, a
    line that is a torn write with a complete record appended after it keeps the record, and
    any other line that is not a journal record leaves the file untouched and raises. The
    original is kept byte for byte as ``FILE.torn-<timestamp>`` and one warning line goes to
    stderr. The check runs under the journal's own lock, so a write in progress is never taken
    for a torn one.

    Raises:
        NotStorageError: A line of the file is neither a journal record nor a torn write.
        DynosimError: The repair could not be written (the file is left as it was).
    """
    if not path.is_file() or path.stat().st_size == 0:
        return False
    if not full and _last_line_ok(path):
        return False
    from search.store.backend import HolderLock

    lock = HolderLock(str(path))
    lock.acquire()
    try:
        data = path.read_bytes()
        kept, dropped = _good_lines(data, path)
        if dropped == 0:
            return False
        backup = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%d-%H%M%S')}")
        tmp = path.with_name(path.name + ".repair")
        try:
            shutil.copyfile(path, backup)
            shutil.copystat(path, backup)
            tmp.write_bytes(kept)
            os.replace(tmp, path)
        except OSError as exc:
            for leftover in (backup, tmp):
                leftover.unlink(missing_ok=True)
            raise DynosimError(
                f"journal {path} has a torn line from an interrupted write and cannot be "
                f"repaired ({exc.strerror or exc}); the file is unchanged: free space and retry"
            ) from None
    finally:
        lock.release()
    print(
        f"dynosim: warning: journal {path} had {dropped} torn bytes from an interrupted write; "
        f"repaired (original kept as {backup.name})",
        file=sys.stderr,
    )
    return True


def _last_line_ok(path: Path) -> bool:
    with path.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        chunk = 1 << 16
        while True:
            start = max(0, size - chunk)
            f.seek(start)
            tail = f.read()
            if not tail.endswith(b"\n"):
                return False
            cut = tail.rfind(b"\n", 0, len(tail) - 1)
            if cut >= 0 or start == 0:
                return _is_record(tail[cut + 1 :])
            chunk *= 4


def _is_record(line: bytes) -> bool:
    """A complete journal record: a JSON object starting with ``{"op_code":``."""
    if not line.startswith(JOURNAL_OP_CODE):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _is_torn(fragment: bytes) -> bool:
    """The start of a record cut short by a crash (no newline inside)."""
    head = fragment[: len(JOURNAL_OP_CODE)]
    return JOURNAL_OP_CODE.startswith(head) and b"\n" not in fragment


def _torn_then_record(line: bytes) -> int:
    """Where the record starts in a line that is a torn write followed by a record, else 0."""
    start = line.rfind(JOURNAL_OP_CODE)
    if start > 0 and _is_torn(line[:start]) and _is_record(line[start:]):
        return start
    return 0


def _line_ok(line: bytes) -> bool:
    """A last line as a crash can leave it: a record, torn, or a torn write then a record."""
    if _is_record(line) or _torn_then_record(line):
        return True
    return _is_torn(line.removesuffix(b"\n"))


def _good_lines(data: bytes, path: Path) -> tuple[bytes, int]:
    """Every record of the file, torn writes dropped: ``(kept bytes, dropped byte count)``.

    Raises:
        NotStorageError: A line is neither a record nor a torn write (nothing is dropped).
    """
    kept, dropped = [], 0
    lines = data.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        if line.endswith(b"\n") and _is_record(line):
            kept.append(line)
        elif line.endswith(b"\n") and (start := _torn_then_record(line)):
            kept.append(line[start:])  # a torn write, then a complete record on the same line
            dropped += start
        elif number == len(lines) and _is_torn(line.removesuffix(b"\n")):
            dropped += len(line)  # torn last line
        else:
            raise NotStorageError(str(path), f"line {number} is not a journal record")
    return b"".join(kept), dropped
