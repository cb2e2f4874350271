"""One driver per study: a lease with a heartbeat, kept in the study's own storage.

The driver writes the study system attribute ``dynosim:lease`` (its host, pid and a random
token, since when, the last heartbeat and the expiry it promises) and renews the heartbeat every
``HEARTBEAT_S`` from a background thread: the driver loop can block for a whole simulation in
``Evaluator.wait``. System attributes work on every Optuna storage (journal, SQLite,
PostgreSQL), so the lock needs nothing else. Another ``tune``/``resume`` refuses with who holds
the study; it takes over only when the lease is stale: no heartbeat for ``ttl_s``, or the holder
ran on this host and its process is gone (a crash is then seen at once).

In a journal file the lease is read and written under the journal's lock with nothing in
between (:meth:`StudyRecord.atomic`): a compare-and-swap. Optuna has no such thing for
the other storages, so there taking a lease writes it, waits ``SETTLE_S`` and reads it back: of
two drivers starting together, the one whose write landed last keeps the study and the other
refuses. A heartbeat that finds another holder's token stops
its driver at the next write (:meth:`Lease.check`).
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from dynosim.errors import DynosimError

if TYPE_CHECKING:
    from types import TracebackType

    from search.store.record import StudyRecord

LEASE_KEY = "dynosim:lease"
TTL_S = 45.0
"""A lease without a heartbeat for this long is expired and may be taken over."""
HEARTBEAT_S = 5.0
"""How often the holder renews its lease."""
SETTLE_S = 0.2
"""Wait between writing a new lease and reading it back (two drivers starting together)."""


class StudyLockedError(DynosimError):
    """Another driver holds the study's lease."""


class LeaseLostError(DynosimError):
    """This driver's lease was taken over or could not be renewed in time."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who drives a study: host, process id, random token; wall-clock times in epoch seconds."""

    host: str
    pid: int
    token: str
    since: float
    heartbeat: float
    ttl_s: float

    @classmethod
    def me(cls, ttl_s: float) -> Holder:
        """A new holder for this process."""
        now = time.time()
        return cls(socket.gethostname(), os.getpid(), secrets.token_hex(4), now, now, ttl_s)

    @classmethod
    def parse(cls, value: Any) -> Holder | None:
        """The holder stored as ``value`` (``None`` if released or not a lease)."""
        if not isinstance(value, dict):
            return None
        try:
            return cls(
                host=str(value["host"]),
                pid=int(value["pid"]),
                token=str(value["token"]),
                since=float(value["since"]),
                heartbeat=float(value["heartbeat"]),
                ttl_s=float(value["ttl_s"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def label(self) -> str:
        """``host:pid``."""
        return f"{self.host}:{self.pid}"

    def stale_reason(self, now: float | None = None) -> str | None:
        """Why the lease may be taken over, or ``None`` while it is live."""
        quiet_s = (time.time() if now is None else now) - self.heartbeat
        if quiet_s > self.ttl_s:
            return f"no heartbeat for {quiet_s:.0f} s"
        if self.host == socket.gethostname() and not _alive(self.pid):
            return f"process {self.pid} is gone"
        return None

    def describe(self, now: float | None = None) -> str:
        """One line: who holds it, since when, how long until it expires."""
        now = time.time() if now is None else now
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        left = max(0.0, self.heartbeat + self.ttl_s - now)
        return (
            f"driver {self.label} (token {self.token}) since {since}, last heartbeat "
            f"{now - self.heartbeat:.0f} s ago; its lease expires {left:.0f} s after its last "
            "heartbeat"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def current_holder(record: StudyRecord) -> Holder | None:
    """The stored lease of the study, live or stale (``None`` when released)."""
    return Holder.parse(record.system_attr(LEASE_KEY))


def live_holder(record: StudyRecord) -> Holder | None:
    """The holder of a live lease, or ``None`` if the study is free to drive."""
    h = current_holder(record)
    return h if h is not None and h.stale_reason() is None else None


def refuse_if_held(record: StudyRecord) -> None:
    """Raise if a live driver holds the study.

    Raises:
        StudyLockedError: With who holds it, since when and how long until it expires.
    """
    h = live_holder(record)
    if h is not None:
        raise StudyLockedError(
            f"study {record.name!r} is being driven by {h.describe()}; wait for it to finish, "
            "stop it, or resume after its lease expires"
        )


class Lease:
    """This driver's hold on a study; renewed by a daemon thread until :meth:`release`.

    Use :meth:`acquire`, then as a context manager (released on exit, Ctrl-C or an error).
    """

    def __init__(self, record: StudyRecord, holder: Holder, heartbeat_s: float) -> None:
        self.record = record
        self.holder = holder
        self.heartbeat_s = heartbeat_s
        self.lost: str | None = None
        self.renewed_at = time.monotonic()
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="dynosim-lease", daemon=True)

    @classmethod
    def acquire(
        cls, record: StudyRecord, *, ttl_s: float | None = None, heartbeat_s: float | None = None
    ) -> Lease:
        """Take the study's lease (taking over a stale one) and start the heartbeat.

        Raises:
            StudyLockedError: A live driver holds the study, or won a simultaneous start.
        """
        from search.store.backend import JournalStore

        me = Holder.me(TTL_S if ttl_s is None else ttl_s)
        with record.atomic():  # a journal: read and write with no driver in between
            refuse_if_held(record)
            previous = current_holder(record)
            record.set_system_attr(LEASE_KEY, asdict(me))
        if not isinstance(record.storage, JournalStore):
            time.sleep(SETTLE_S)
        if (now := current_holder(record)) is None or now.token != me.token:
            refuse_if_held(record)
            raise StudyLockedError(f"study {record.name!r}: another driver started it just now")
        if previous is not None:
            print(
                f"dynosim: taking over study {record.name!r} from driver {previous.label} "
                f"({previous.stale_reason()})",
                file=sys.stderr,
            )
        lease = cls(record, me, HEARTBEAT_S if heartbeat_s is None else heartbeat_s)
        record.guard = lease.check
        lease._thread.start()
        return lease

    def renew(self) -> None:
        """Write a new heartbeat unless another driver took the lease over.

        In a journal the check and the write are one compare-and-swap: a heartbeat never
        overwrites a takeover that landed just before it.
        """
        with self.record.atomic():
            now = current_holder(self.record)
            if now is None or now.token != self.holder.token:
                who = "nobody" if now is None else f"driver {now.label}"
                self.lost = f"its lease on study {self.record.name!r} is now held by {who}"
                return
            beat = asdict(self.holder) | {"heartbeat": time.time()}
            self.record.set_system_attr(LEASE_KEY, beat)
        self.renewed_at = time.monotonic()

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s) and self.lost is None:
            try:
                self.renew()
            except Exception as exc:  # the driver's next write reports an outage itself
                self.error = " ".join(str(exc).split())[:200]

    def check(self) -> None:
        """Raise if this driver no longer holds the study (called before every write).

        Raises:
            LeaseLostError: Another driver took over, or no heartbeat landed for ``ttl_s``.
        """
        late_s = time.monotonic() - self.renewed_at
        if self.lost is None and late_s > self.holder.ttl_s:
            self.lost = f"could not renew its lease for {late_s:.0f} s ({self.error or 'no error'})"
        if self.lost is not None:
            raise LeaseLostError(f"this driver stopped: {self.lost}; completed trials are stored")

    def release(self) -> None:
        """Stop the heartbeat and clear the lease if it is still ours (best effort)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.heartbeat_s + 5)
        self.record.guard = None
        try:
            now = current_holder(self.record)
            if now is not None and now.token == self.holder.token:
                self.record.set_system_attr(LEASE_KEY, None)
        except Exception:  # storage gone: the lease expires, or its pid is seen dead
            return

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
