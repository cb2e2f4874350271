"""The journal file backend dynosim writes through: all-or-nothing appends, a known lock holder.

Optuna's ``JournalFileBackend`` appends one JSON record a line under a symlink lock file. Three
things it does not do, and a study needs (issue 23):

* **No torn line on a full disk.** A write the disk has no room for is rolled back
  (``ftruncate`` to the size before it, which needs no space), so ENOSPC leaves the journal as
  it was and the caller gets the ``OSError``.
* **No empty file.** The file is created by its first append, never empty beforehand: an empty
  file at a storage path is never one of ours, and :func:`search.store.open.open_storage`
  refuses it instead of writing into it.
* **Several records in one write.** :meth:`JournalBackend.atomic` holds the file lock and
  buffers the records written meanwhile (reads see them), then appends them with one
  ``write``: a study is created together with its study file, and a lease is read and written
  with no other driver in between (a compare-and-swap).

The lock is Optuna's symlink lock (``FILE.lock``, so Optuna processes on the same file still
exclude each other) whose link target names the holder's host and pid: a lock left by a
killed dynosim process on this host is broken at once instead of after Optuna's 30 s grace
period.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.storages.journal._file import BaseJournalFileLock

TAG = "#dynosim-lock "
"""Separates the journal path from ``HOST PID`` in the lock symlink's target."""
GRACE_S = 30.0
"""A lock of unknown holder (another host, plain Optuna) unchanged this long is broken."""


_HELD: set[str] = set()
"""Lock files this process holds (any thread), registered with the link made."""
_HELD_GUARD = threading.Lock()


class HolderLock(JournalFileSymlinkLock):
    """Optuna's symlink lock; the link target records ``HOST PID`` of the holder.

    A lock naming this very process that no thread of it holds (:data:`_HELD`) was orphaned
    by an interrupt that landed between making the link and the code that releases it (a
    Ctrl-C between ``acquire`` returning and the ``try`` of the caller): it is broken at once,
    where it would otherwise block this process's own next write (its "stopped" status, the
    lease release) for the grace period.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path, grace_period=int(GRACE_S))
        self._target = f"{path}{TAG}{socket.gethostname()} {os.getpid()}"

    def acquire(self) -> bool:
        """Take the lock, breaking one whose holder died on this host or is this process's orphan.

        A lock of unknown holder that has not changed for ``GRACE_S`` is broken, as Optuna does.
        """
        pause, seen, since = 0.001, None, time.monotonic()
        while True:
            with _HELD_GUARD:  # the link and its registration, as one step for our threads
                try:
                    os.symlink(self._target, self._lock_file)
                    _HELD.add(self._lock_file)
                    return True
                except FileExistsError:
                    pass
            try:
                target, mtime = os.readlink(self._lock_file), os.lstat(self._lock_file).st_mtime
            except OSError:
                continue  # released meanwhile
            if _dead_holder(target):
                self._break(target)
                continue
            if self._break_orphan(target):
                continue
            if (target, mtime) != seen:
                seen, since = (target, mtime), time.monotonic()
            elif time.monotonic() - since > GRACE_S:
                self._break(target)
                continue
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _break_orphan(self, target: str) -> bool:
        """Break the lock if ``target`` names this process and none of its threads holds it.

        Checked and broken under :data:`_HELD_GUARD`, so no thread of this process (whose links
        all read the same) can take the lock in between and lose it to this break.
        """
        with _HELD_GUARD:
            if target != self._target or self._lock_file in _HELD:
                return False
            self._break(target)
            return True

    def release(self) -> None:
        """Release the lock (Optuna's rename and unlink) and forget that this process holds it."""
        try:
            super().release()
        finally:
            with _HELD_GUARD:
                _HELD.discard(self._lock_file)

    def _break(self, target: str) -> None:
        """Remove the lock if it still is the one seen (a rename only one process wins)."""
        away = f"{self._lock_file}.{uuid.uuid4().hex}.broken"
        try:
            os.rename(self._lock_file, away)
        except OSError:
            return
        if os.readlink(away) != target:  # another process took it meanwhile: put it back
            try:
                os.rename(away, self._lock_file)
            except OSError:
                os.unlink(away)
            return
        os.unlink(away)


def _dead_holder(target: str) -> bool:
    """Whether a lock target names a process of this host that no longer exists."""
    _, tag, holder = target.partition(TAG)
    host, _, pid = holder.rpartition(" ")
    if not tag or host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class JournalBackend(JournalFileBackend):
    """Optuna's journal file backend with rolled-back appends and :meth:`atomic` batches."""

    def __init__(self, path: Path) -> None:
        # Not super().__init__: it creates the file empty; the first append creates it here.
        self._file_path = str(path)
        self._lock = HolderLock(self._file_path)
        self._log_number_offset: dict[int, int] = {0: 0}
        self._local = threading.local()

    @property
    def _pending(self) -> list[dict[str, Any]] | None:
        return getattr(self._local, "pending", None)

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        """Optuna's reader; a missing file reads as empty; a batch's records come last."""
        if os.path.exists(self._file_path):
            yield from super().read_logs(log_number_from)
        pending = self._pending
        if pending:
            first = max(self._log_number_offset)  # records in the file
            for number, log in enumerate(pending, start=first):
                if number >= log_number_from:
                    yield log

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        """Append ``logs`` in one write (or buffer them inside :meth:`atomic`)."""
        pending = self._pending
        if pending is not None:
            pending.extend(logs)
            return
        with _locked(self._lock):
            self._write(logs)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Hold the lock; records written inside are appended together at the end, or not at all.

        On an error inside (or a failed write) nothing is appended; the storage object that
        wrote through this backend must then be dropped (its memory saw the records).
        """
        if self._pending is not None:
            yield
            return
        with _locked(self._lock):
            self._local.pending = []
            try:
                yield
                logs: list[dict[str, Any]] = self._pending or []
            finally:
                self._local.pending = None
            if logs:
                self._write(logs)

    def _write(self, logs: list[dict[str, Any]]) -> None:
        data = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode()
        existed = os.path.exists(self._file_path)
        fd = os.open(self._file_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except BaseException:
                os.ftruncate(fd, size)  # shrinking needs no space: no torn line is left
                if not existed:
                    os.unlink(self._file_path)
                raise
        finally:
            os.close(fd)


@contextmanager
def _locked(lock: BaseJournalFileLock) -> Iterator[None]:
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


class JournalStore(optuna.storages.JournalStorage):
    """Optuna's ``JournalStorage`` on a :class:`JournalBackend`, which it exposes as ``backend``."""

    def __init__(self, backend: JournalBackend) -> None:
        super().__init__(backend)
        self.backend = backend
        # re-entrant: :meth:`atomic` holds it across the storage calls made inside
        self._thread_lock = threading.RLock()  # type: ignore[assignment]

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """:meth:`JournalBackend.atomic`, holding this process's other threads back first.

        The thread lock comes first: a thread waiting for the file lock inside a storage call
        holds it, so taking them in the other order could deadlock.
        """
        with self._thread_lock:
            try:
                with self.backend.atomic():
                    yield
            except BaseException:
                # the records were replayed in memory but not written: read the file afresh
                from optuna.storages.journal._storage import JournalStorageReplayResult

                self._replay_result = JournalStorageReplayResult(self._worker_id_prefix)
                self.backend._log_number_offset = {0: 0}
                self._sync_with_backend()
                raise

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self._thread_lock = threading.RLock()  # type: ignore[assignment]


@contextmanager
def atomic(storage: object) -> Iterator[None]:
    """:meth:`JournalBackend.atomic` for a dynosim journal; nothing for another storage."""
    if isinstance(storage, JournalStore):
        with storage.atomic():
            yield
    else:
        yield
