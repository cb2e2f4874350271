"""Optuna storage: the single record of every evaluation, whichever optimizer proposed it.

Storage URLs: a file path or ``journal:PATH`` is Optuna's journal file (embedded, no server,
~3 ms a trial); ``sqlite:///PATH`` and any other SQLAlchemy URL (``postgresql://...``) is
Optuna's RDB storage. ``optuna-dashboard PATH_OR_URL`` shows the studies.

Trial layout (read by the report):

* ``params`` with distributions from the space; ``values`` in study directions;
* a config that cannot run is COMPLETE with penalty values and every constraint violated
  (``search.problem``); only evaluations lost to a crash are FAIL (and re-queued on resume);
* ``system_attrs["constraints"]``: list of floats, ``<= 0`` satisfied;
* ``user_attrs``: ``metrics``, ``config``, ``config_hash``, ``seed``, ``infeasible_reason``,
  ``feasible``, ``wall_s``.

Only the driver calls the writers here, through :class:`StudyRecord`, which retries SQLite's
"database is locked" with backoff and turns a storage that went away (a PostgreSQL server
stopped mid-study) into one :class:`StorageUnavailableError` line. A journal file whose last
line a crash left torn is repaired when it is opened (:func:`repair_journal`).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dynosim.errors import ConfigError, DynosimError
from search.evaluator import TrialResult
from search.journal import repair_journal
from search.optimizers.optuna_sampler import distributions
from search.space import Params, Space

if TYPE_CHECKING:
    import optuna

T = TypeVar("T")

SQLITE_TIMEOUT_S = 30.0
"""SQLite busy timeout: how long one statement waits for another connection's lock."""
LOCKED_RETRY_S = 120.0
"""How long a write that still found the database locked is retried (with backoff)."""


class StorageUnavailableError(DynosimError):
    """The storage stopped answering mid-study (e.g. the database server went away)."""


def open_storage(url: str, *, create: bool = True) -> optuna.storages.BaseStorage:
    """Open the storage named by ``url``, creating a missing file unless ``create`` is false.

    Raises:
        ConfigError: The storage cannot be opened (or its file is missing and not created).
    """
    import optuna

    if not create and ("://" not in url or url.startswith("sqlite:///")):
        path = Path(url.removeprefix("sqlite:///").removeprefix("journal:")).expanduser()
        if not path.is_file():
            raise ConfigError("--storage", url, "an existing storage file")
        if url.startswith("sqlite:///") and not _has_optuna_schema(path):
            # Opening it with RDBStorage would write Optuna's tables into someone's database.
            raise ConfigError("--storage", url, "a SQLite file that holds Optuna studies")

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        if "://" in url:
            return _open_rdb(url)
        path = Path(url.removeprefix("journal:")).expanduser()
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


def _open_rdb(url: str) -> optuna.storages.RDBStorage:
    import optuna

    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    else:  # a server: check a pooled connection before use (it may have restarted)
        kwargs = {"pool_pre_ping": True}
    return _retry_locked(lambda: optuna.storages.RDBStorage(url, engine_kwargs=kwargs))


def _open_journal(path: Path) -> optuna.storages.JournalStorage:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    repair_journal(path, full=False)
    try:
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    except ValueError:  # a bad line inside the file (a torn line that was written after)
        if not repair_journal(path, full=True):
            raise
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


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


@contextmanager
def _interrupt_after() -> Iterator[None]:
    """Hold Ctrl-C back until the storage call inside has returned, then deliver it.

    An interrupt that lands inside Optuna's journal-file lock can leave the lock file behind,
    and every later write (the driver's own "stopped" status, the lease release) then waits
    for it to go stale (30 s). Only the main thread receives signals; elsewhere this does
    nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)


class StudyRecord:
    """Writes one study's trials and attributes (the driver's only way to the storage).

    Every call retries SQLite's "database is locked" and raises
    :class:`StorageUnavailableError` (one line) when the storage stopped answering. Writes of
    trials and user attributes first call ``guard`` (the driver's lease check), if set.

    Args:
        storage: An opened storage.
        name: The study name; the study must exist (see :meth:`create`).
        url: The storage URL, for messages.
    """

    def __init__(self, storage: optuna.storages.BaseStorage, name: str, *, url: str = "") -> None:
        self.storage = storage
        self.name = name
        self.url = url
        self.guard: Callable[[], None] | None = None
        self.study_id = int(self.call(storage.get_study_id_from_name, name))

    @classmethod
    def create(
        cls,
        storage: optuna.storages.BaseStorage,
        name: str,
        directions: Sequence[str],
        *,
        url: str = "",
    ) -> StudyRecord:
        """Create a new study.

        Raises:
            ConfigError: A study of that name already exists.
            StudyLockedError: ... and another driver is running it.
        """
        import optuna

        if name in study_names(storage):
            from search.lease import refuse_if_held

            refuse_if_held(cls(storage, name, url=url))
            raise ConfigError("name", name, "a new study name (use `dynosim resume` to continue)")
        dirs = [optuna.study.StudyDirection[d.upper()] for d in directions]
        _retry_locked(lambda: storage.create_new_study(dirs, name))
        return cls(storage, name, url=url)

    def call(self, fn: Callable[..., T], *args: Any, write: bool = False) -> T:
        """``fn(*args)`` on the storage, retried while locked; ``write`` checks the guard first.

        Raises:
            StorageUnavailableError: The storage stopped answering.
        """
        if write and self.guard is not None:
            self.guard()
        try:
            with _interrupt_after():
                return _retry_locked(lambda: fn(*args))
        except DynosimError:
            raise
        except Exception as exc:
            if not _is_outage(exc) and not _is_locked(exc):
                raise
            where = self.url or "the storage"
            root = _chain(exc)[-1]
            why = " ".join(str(root).split())[:160] or type(root).__name__
            raise StorageUnavailableError(
                f"storage {where} stopped answering ({type(root).__name__}: {why}); every "
                f"completed trial is stored: run `dynosim resume {self.name} --storage "
                f"{self.url or 'URL'}` when it is back"
            ) from None

    @property
    def directions(self) -> list[str]:
        """Stored objective directions, lower-case."""
        dirs = self.call(self.storage.get_study_directions, self.study_id)
        return [d.name.lower() for d in dirs]

    @property
    def user_attrs(self) -> dict[str, Any]:
        """The study's user attributes."""
        return dict(self.call(self.storage.get_study_user_attrs, self.study_id))

    def set_attr(self, key: str, value: Any) -> None:
        """Set one study user attribute."""
        self.call(self.storage.set_study_user_attr, self.study_id, key, value, write=True)

    def system_attr(self, key: str) -> Any:
        """One study system attribute (``None`` if unset)."""
        return self.call(self.storage.get_study_system_attrs, self.study_id).get(key)

    def set_system_attr(self, key: str, value: Any) -> None:
        """Set one study system attribute (not guarded: the lease itself lives here)."""
        self.call(self.storage.set_study_system_attr, self.study_id, key, value)

    def trials(self) -> list[optuna.trial.FrozenTrial]:
        """Every trial, in number order."""
        return list(self.call(lambda: self.storage.get_all_trials(self.study_id, deepcopy=False)))

    def start(self, space: Space, params: Params, seed: int) -> int:
        """Create a RUNNING trial for ``params``; returns its trial id."""
        import optuna

        template = optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING,
            params=dict(params),
            distributions=distributions(space, params),
            user_attrs={"seed": seed},
        )
        new = self.storage.create_new_trial
        return int(self.call(lambda: new(self.study_id, template_trial=template), write=True))

    def finish(self, trial_id: int, r: TrialResult) -> None:
        """Record a result on a RUNNING trial and mark it COMPLETE."""
        import optuna

        attrs: dict[str, Any] = {
            "metrics": r.metrics,
            "config": r.config,
            "config_hash": r.config_hash,
            "seed": r.seed,
            "infeasible_reason": r.reason,
            "feasible": r.feasible,
            "wall_s": r.wall_s,
        }
        st = self.storage
        for key, value in attrs.items():
            self.call(st.set_trial_user_attr, trial_id, key, value, write=True)
        self.call(st.set_trial_system_attr, trial_id, "constraints", list(r.constraints))
        complete = optuna.trial.TrialState.COMPLETE
        self.call(st.set_trial_state_values, trial_id, complete, list(r.values), write=True)

    def fail(self, trial_id: int, why: str) -> None:
        """Mark a trial FAIL (its evaluation was lost), recording why."""
        import optuna

        st = self.storage
        self.call(st.set_trial_system_attr, trial_id, "fail_reason", why, write=True)
        self.call(st.set_trial_state_values, trial_id, optuna.trial.TrialState.FAIL, write=True)


def stored_result(trial: optuna.trial.FrozenTrial) -> TrialResult:
    """The ``TrialResult`` of a COMPLETE trial, as written by :func:`finish_trial`."""
    u = trial.user_attrs
    return TrialResult(
        params=dict(trial.params),
        config=dict(u.get("config", {})),
        config_hash=str(u.get("config_hash", "")),
        metrics={k: float(v) for k, v in u.get("metrics", {}).items()},
        values=tuple(float(v) for v in trial.values or ()),
        constraints=tuple(float(c) for c in trial.system_attrs.get("constraints", ())),
        feasible=bool(u.get("feasible", False)),
        reason=u.get("infeasible_reason"),
        seed=int(u.get("seed", 0)),
        wall_s=float(u.get("wall_s", 0.0)),
    )


@dataclass(frozen=True, slots=True)
class TrialCounts:
    """Trials of a study by state: the one definition ``tune``, ``studies`` and ``report`` show.

    ``total`` is every stored trial; ``complete`` the evaluated ones (a config that cannot run
    is a COMPLETE infeasible trial), which the trial budget counts; ``failed`` evaluations lost
    to a crash (re-run on resume); ``running`` trials being evaluated, or left by a crash;
    ``feasible`` complete trials that meet every constraint (``search.report.is_feasible``).
    """

    total: int
    complete: int
    running: int
    failed: int
    feasible: int

    def summary(self) -> str:
        """``"34 trials (32 complete, 1 running, 1 failed), 30 feasible"``."""
        return (
            f"{self.total} trials ({self.complete} complete, {self.running} running, "
            f"{self.failed} failed), {self.feasible} feasible"
        )


def trial_counts(trials: Sequence[optuna.trial.FrozenTrial]) -> TrialCounts:
    """Count ``trials`` by state (see :class:`TrialCounts`)."""
    import optuna

    from search.report import is_feasible

    ts = optuna.trial.TrialState
    return TrialCounts(
        total=len(trials),
        complete=sum(t.state == ts.COMPLETE for t in trials),
        running=sum(t.state == ts.RUNNING for t in trials),
        failed=sum(t.state == ts.FAIL for t in trials),
        feasible=sum(is_feasible(t) for t in trials),
    )
