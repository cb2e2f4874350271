"""The driver's only way to write a study: :class:`StudyRecord`.

Every call retries SQLite's "database is locked" with backoff and turns a storage that went
away (a PostgreSQL server stopped mid-study) into one :class:`StorageUnavailableError` line.
What a trial's attributes hold is :mod:`search.store.schema`'s business.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from dynosim.errors import ConfigError, DynosimError
from search.store.lease import refuse_if_held
from search.store.open import _chain, _is_locked, _is_outage, _retry_locked, study_names
from search.store.schema import CONSTRAINTS, FAIL_REASON, SEED, STUDY, distributions, encode
from search.study.space import Params, Space
from search.trial import TrialResult

if TYPE_CHECKING:
    import optuna

T = TypeVar("T")


class StorageUnavailableError(DynosimError):
    """The storage stopped answering mid-study (e.g. the database server went away)."""


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
        attrs: dict[str, Any] | None = None,
        url: str = "",
    ) -> StudyRecord:
        """Create a new study with its user attributes ``attrs`` (the study file among them).

        In a journal the study and its attributes are one write: a kill at any moment leaves
        either no study or a complete one. Elsewhere (SQLite, a server) a kill between the two
        leaves a study without its study file and without trials: :meth:`create` of the same
        name starts that one again instead of refusing the name.

        Raises:
            ConfigError: A study of that name already exists.
            StudyLockedError: ... and another driver is running it.
        """
        import optuna

        from search.store.backend import atomic

        dirs = [optuna.study.StudyDirection[d.upper()] for d in directions]
        attrs = attrs or {}
        if name in study_names(storage):
            old = cls(storage, name, url=url)
            refuse_if_held(old)
            if not old.unfinished_creation():
                raise ConfigError(
                    "name", name, "a new study name (use `dynosim resume` to continue)"
                )
            print(
                f"dynosim: warning: study {name!r} in {url or 'the storage'} was interrupted "
                "while it was being created (no study file, no trial): creating it again",
                file=sys.stderr,
            )
            old.call(storage.delete_study, old.study_id)

        def make() -> None:
            with atomic(storage):
                sid = storage.create_new_study(dirs, name)
                for key, value in attrs.items():
                    storage.set_study_user_attr(sid, key, value)

        try:
            _retry_locked(make)
        except (optuna.exceptions.DuplicatedStudyError, KeyError):  # KeyError: deleted meanwhile
            why = "a new study name (another driver created it just now)"
            raise ConfigError("name", name, why) from None
        except OSError as exc:
            raise _write_failed(exc, url, name) from None
        return cls(storage, name, url=url)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """The writes inside land together or not at all (a journal; elsewhere one by one).

        Raises:
            StorageUnavailableError: The writes could not be made (a full disk).
        """
        from search.store.backend import atomic

        try:
            with atomic(self.storage):
                yield
        except OSError as exc:
            raise _write_failed(exc, self.url, self.name) from None

    def unfinished_creation(self) -> bool:
        """Whether a kill interrupted this study's creation: no study file and no trial."""
        if self.user_attrs.get(STUDY) is not None:
            return False
        return not self.call(lambda: self.storage.get_n_trials(self.study_id))

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
        except OSError as exc:  # a journal file on a full disk, read-only, I/O error
            raise _write_failed(exc, self.url, self.name) from None
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

    def trial_id(self, number: int) -> int:
        """The storage's id of this study's trial ``number``."""
        get = self.storage.get_trial_id_from_study_id_trial_number
        return int(self.call(get, self.study_id, number))

    def start(self, space: Space, params: Params, seed: int) -> int:
        """Create a RUNNING trial for ``params``; returns its trial id."""
        import optuna

        template = optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING,
            params=dict(params),
            distributions=distributions(space, params),
            user_attrs={SEED: seed},
        )
        new = self.storage.create_new_trial
        return int(self.call(lambda: new(self.study_id, template_trial=template), write=True))

    def finish(self, trial_id: int, r: TrialResult) -> None:
        """Record a result on a RUNNING trial and mark it COMPLETE."""
        import optuna

        st = self.storage
        for key, value in encode(r).items():
            self.call(st.set_trial_user_attr, trial_id, key, value, write=True)
        self.call(st.set_trial_system_attr, trial_id, CONSTRAINTS, list(r.constraints))
        complete = optuna.trial.TrialState.COMPLETE
        self.call(st.set_trial_state_values, trial_id, complete, list(r.values), write=True)

    def fail(self, trial_id: int, why: str) -> None:
        """Mark a trial FAIL (its evaluation was lost), recording why."""
        import optuna

        st = self.storage
        self.call(st.set_trial_system_attr, trial_id, FAIL_REASON, why, write=True)
        self.call(st.set_trial_state_values, trial_id, optuna.trial.TrialState.FAIL, write=True)


def _write_failed(exc: OSError, url: str, name: str) -> StorageUnavailableError:
    """One line for a storage file that could not be written: what, where, how to resume."""
    import errno

    why = exc.strerror or str(exc) or type(exc).__name__
    where = url or exc.filename or "the storage"
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    fix = "once space is freed" if full else "once the file can be written again"
    return StorageUnavailableError(
        f"storage {where}: {why} (errno {exc.errno}); the failed write left no trace and every "
        f"completed trial is stored: {fix}, run `dynosim resume {name} --storage "
        f"{url or 'URL'}`"
    )


def check_directions(stored: Sequence[str], wanted: Sequence[str]) -> None:
    """Raise when a stored study's directions differ from the study file's.

    Raises:
        ConfigError: The directions differ (Optuna's ``load_if_exists`` does not check).
    """
    if [d.lower() for d in stored] != [d.lower() for d in wanted]:
        raise ConfigError("objectives", list(wanted), f"the stored directions {list(stored)}")
