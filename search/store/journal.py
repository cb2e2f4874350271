"""Repair of Optuna journal files that a crash mid-write left with a torn line.

Optuna's ``JournalFileBackend`` appends one JSON record a line, under a lock file. A crash
mid-write (on a filesystem without atomic appends) leaves a torn last line: Optuna skips it when
reading, but the next record is appended to it, and from then on every read of the file fails.
:func:`repair_journal` runs when ``search.store.open`` opens a journal.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from dynosim.errors import ConfigError

JOURNAL_OP_CODE = b'{"op_code":'
"""How every line of Optuna's journal starts (``json.dumps`` with compact separators)."""


def repair_journal(path: Path, *, full: bool) -> bool:
    """Repair a journal file that a crash mid-write left with a torn line; True if repaired.

    A torn last line (no newline, or not JSON) is cut off. With ``full``, every line is
    checked, and a line that is a torn write with a complete record appended after it (a
    driver that went on after the crash) keeps the complete record. The original is kept as
    ``FILE.torn-<timestamp>`` and one warning line goes to stderr. The check runs under the
    journal's own lock, so a write in progress is never taken for a torn one.

    Raises:
        ConfigError: A line in the file is neither JSON nor a repairable torn write.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return False
    if not full and _last_line_ok(path):
        return False
    from optuna.storages.journal import JournalFileSymlinkLock

    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        data = path.read_bytes()
        kept, dropped = _good_lines(data, path) if full else _cut_tail(data)
        if dropped == 0:
            return False
        backup = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copy2(path, backup)
        if kept == data[: len(kept)]:
            os.truncate(path, len(kept))
        else:
            tmp = path.with_name(path.name + ".repair")
            tmp.write_bytes(kept)
            os.replace(tmp, path)
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
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _cut_tail(data: bytes) -> tuple[bytes, int]:
    """Drop a torn last line: ``(kept bytes, dropped byte count)``."""
    end = len(data)
    if data.endswith(b"\n") and _is_record(data[data.rfind(b"\n", 0, end - 1) + 1 :]):
        return data, 0
    cut = data.rfind(b"\n", 0, end - 1 if data.endswith(b"\n") else end) + 1
    return data[:cut], end - cut


def _good_lines(data: bytes, path: Path) -> tuple[bytes, int]:
    """Every record of the file, torn writes dropped: ``(kept bytes, dropped byte count)``."""
    kept, dropped = [], 0
    lines = data.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        if line.endswith(b"\n") and _is_record(line):
            kept.append(line)
            continue
        start = line.rfind(JOURNAL_OP_CODE)
        if line.endswith(b"\n") and start > 0 and _is_record(line[start:]):
            kept.append(line[start:])  # a torn write, then a complete record on the same line
            dropped += start
        elif number == len(lines):
            dropped += len(line)  # torn last line
        else:
            raise ConfigError(
                "storage", str(path), f"a journal file (line {number} is not a journal record)"
            )
    return b"".join(kept), dropped
