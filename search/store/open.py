"""Opening an Optuna storage, and the retries and outage detection every storage call uses.

Storage URLs: a file path or ``journal:PATH`` is Optuna's journal file (embedded, no server,
~3 ms a trial); ``sqlite:///PATH`` and any other SQLAlchemy URL (``postgresql://...``) is
Optuna's RDB storage. ``optuna-dashboard PATH_OR_URL`` shows the studies. A file that is not a
study storage is refused untouched; a journal file whose last line a crash left torn is repaired
when it is opened (:func:`repair_journal`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dynosim.errors import ConfigError, DynosimError
from search.store.journal import NotStorageError, check_journal, repair_journal

if TYPE_CHECKING:
    import optuna

T = TypeVar("T")

SQLITE_TIMEOUT_S = 30.0
"""SQLite busy timeout: how long one statement waits for another connection's lock."""
LOCKED_RETRY_S = 120.0
"""How long a write that still found the database locked is retried (with backoff)."""


def open_storage(url: str, *, create: bool = True) -> optuna.storages.BaseStorage:
    """Open the storage named by ``url``, creating a missing file unless ``create`` is false.

    A file that is there is recognised before anything reads its lock, repairs or writes it:
    an Optuna journal (:func:`check_journal`) or a SQLite database holding Optuna's tables (a
    new SQLite file, or an empty one, which SQLite itself takes as an empty database, only
    with ``create``). Anything else is refused and left as it was.

    Raises:
        ConfigError: The storage cannot be opened (or its file is missing and not created).
        NotStorageError: The file is not a study storage.
    """
    import optuna

    file_url = "://" not in url or url.startswith("sqlite:///")
    path = Path(url.removeprefix("sqlite:///").removeprefix("journal:")).expanduser()
    if file_url and not create and not path.is_file():
        if path.exists():
            raise NotStorageError(str(path), "is not a regular file")
        raise ConfigError("--storage", url, "an existing storage file")
    if url.startswith("sqlite:///"):
        _check_sqlite(path, url, create=create)
    elif file_url:
        check_journal(path)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        if "://" in url:
            return _open_rdb(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        return _open_journal(path)
    except DynosimError:
        raise
    except ImportError as exc:
        hint = "install the database driver named in the URL"
        if url.startswith("postgresql://"):
            hint += " (psycopg, or psycopg2-binary with postgresql+psycopg2://...)"
        raise ConfigError("storage", url, f"a reachable storage; {hint}") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError("storage", url, f"a journal file or SQLAlchemy URL ({exc})") from exc
    except Exception as exc:  # SQLAlchemy errors have no common base we can import cheaply
        raise ConfigError("storage", url, f"a reachable storage ({type(exc).__name__})") from exc


SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_sqlite(path: Path, url: str, *, create: bool) -> None:
    """Refuse a file that is not a SQLite database of Optuna's (RDBStorage would write into it).

    Raises:
        NotStorageError: Not a SQLite file, or one without Optuna's tables.
    """
    if not path.exists():
        return
    if not path.is_file():
        raise NotStorageError(str(path), "is not a regular file")
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise NotStorageError(str(path), f"cannot be read ({exc.strerror or exc})") from None
    if not head and create:
        return
    if head != SQLITE_MAGIC:
        why = f"is not a SQLite database that holds Optuna studies ({head[:16]!r})"
        raise NotStorageError(str(path), why)
    if not _has_optuna_schema(path):
        raise NotStorageError(str(path), "is a SQLite database that holds no Optuna studies")


def _open_rdb(url: str) -> optuna.storages.RDBStorage:
    import optuna

    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    else:  # a server: check a pooled connection before use (it may have restarted)
        kwargs = {"pool_pre_ping": True}
    return _retry_locked(lambda: optuna.storages.RDBStorage(url, engine_kwargs=kwargs))


def _open_journal(path: Path) -> optuna.storages.JournalStorage:
    from search.store.backend import JournalBackend, JournalStore

    repair_journal(path, full=False)
    try:
        return JournalStore(JournalBackend(path))
    except ValueError:  # a bad line inside the file (a torn line that was written after)
        if not repair_journal(path, full=True):
            raise
    return JournalStore(JournalBackend(path))


# -- retries and outages -------------------------------------------------------------------


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _is_locked(exc: BaseException) -> bool:
    return any("database is locked" in str(e) for e in _chain(exc))


def _is_outage(exc: BaseException) -> bool:
    """A lost or refused database connection (SQLAlchemy OperationalError / InterfaceError)."""
    names = {type(e).__name__ for e in _chain(exc)}
    return bool(names & {"OperationalError", "InterfaceError", "DisconnectionError"})


def _retry_locked(fn: Callable[[], T], *, limit_s: float | None = None) -> T:
    """Call ``fn``; while SQLite says "database is locked", retry with backoff."""
    deadline = time.monotonic() + (LOCKED_RETRY_S if limit_s is None else limit_s)
    pause = 0.05
    while True:
        try:
            return fn()
        except Exception as exc:
            if not _is_locked(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


def _has_optuna_schema(path: Path) -> bool:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
    except sqlite3.Error:
        return False
    return any(name == "studies" for (name,) in rows)


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    """Names of every study in ``storage``."""
    return [s.study_name for s in storage.get_all_studies()]


def load_study(storage_url: str, name: str) -> optuna.Study:
    """Load study ``name`` from a storage URL or journal file path (never creates one).

    Raises:
        DynosimError: The storage file does not exist, or holds no study called ``name``.
    """
    import optuna

    if "://" not in storage_url or storage_url.startswith("sqlite:///"):
        raw = storage_url.removeprefix("sqlite:///").removeprefix("journal:")
        path = Path(raw).expanduser()
        if not path.is_file():
            raise DynosimError(f"no storage file at {path}")
    storage = open_storage(storage_url, create=False)
    names = study_names(storage)
    if name not in names:
        present = ", ".join(sorted(names)) or "none"
        raise DynosimError(f"no study {name!r} in {storage_url} (studies: {present})")
    return optuna.load_study(study_name=name, storage=storage)
