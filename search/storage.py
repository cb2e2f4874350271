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

Only the driver calls the writers here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynosim.errors import ConfigError
from search.evaluator import TrialResult
from search.optimizers.optuna_sampler import distributions
from search.space import Params, Space

if TYPE_CHECKING:
    import optuna


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
            if url.startswith("sqlite:///"):
                Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.RDBStorage(url)
        path = Path(url.removeprefix("journal:")).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        from optuna.storages.journal import JournalFileBackend

        backend = JournalFileBackend(str(path))
        return optuna.storages.JournalStorage(backend)
    except ImportError as exc:
        hint = "install the database driver named in the URL"
        if url.startswith("postgresql://"):
            hint += " (psycopg, or psycopg2-binary with postgresql+psycopg2://...)"
        raise ConfigError("storage", url, f"a reachable storage; {hint}") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError("storage", url, f"a journal file or SQLAlchemy URL ({exc})") from exc
    except Exception as exc:  # SQLAlchemy errors have no common base we can import cheaply
        raise ConfigError("storage", url, f"a reachable storage ({type(exc).__name__})") from exc


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


class StudyRecord:
    """Writes one study's trials and attributes (the driver's only way to the storage).

    Args:
        storage: An opened storage.
        name: The study name; the study must exist (see :meth:`create`).
    """

    def __init__(self, storage: optuna.storages.BaseStorage, name: str) -> None:
        self.storage = storage
        self.name = name
        self.study_id = int(storage.get_study_id_from_name(name))

    @classmethod
    def create(
        cls, storage: optuna.storages.BaseStorage, name: str, directions: Sequence[str]
    ) -> StudyRecord:
        """Create a new study.

        Raises:
            ConfigError: A study of that name already exists.
        """
        import optuna

        if name in study_names(storage):
            raise ConfigError("name", name, "a new study name (use `dynosim resume` to continue)")
        dirs = [optuna.study.StudyDirection[d.upper()] for d in directions]
        storage.create_new_study(dirs, name)
        return cls(storage, name)

    @property
    def directions(self) -> list[str]:
        """Stored objective directions, lower-case."""
        return [d.name.lower() for d in self.storage.get_study_directions(self.study_id)]

    @property
    def user_attrs(self) -> dict[str, Any]:
        """The study's user attributes."""
        return dict(self.storage.get_study_user_attrs(self.study_id))

    def set_attr(self, key: str, value: Any) -> None:
        """Set one study user attribute."""
        self.storage.set_study_user_attr(self.study_id, key, value)

    def trials(self) -> list[optuna.trial.FrozenTrial]:
        """Every trial, in number order."""
        return list(self.storage.get_all_trials(self.study_id, deepcopy=False))

    def start(self, space: Space, params: Params, seed: int) -> int:
        """Create a RUNNING trial for ``params``; returns its trial id."""
        import optuna

        template = optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING,
            params=dict(params),
            distributions=distributions(space, params),
            user_attrs={"seed": seed},
        )
        return int(self.storage.create_new_trial(self.study_id, template_trial=template))

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
        for key, value in attrs.items():
            self.storage.set_trial_user_attr(trial_id, key, value)
        self.storage.set_trial_system_attr(trial_id, "constraints", list(r.constraints))
        complete = optuna.trial.TrialState.COMPLETE
        self.storage.set_trial_state_values(trial_id, complete, list(r.values))

    def fail(self, trial_id: int, why: str) -> None:
        """Mark a trial FAIL (its evaluation was lost), recording why."""
        import optuna

        self.storage.set_trial_system_attr(trial_id, "fail_reason", why)
        self.storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)


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


def study_rows(storage: optuna.storages.BaseStorage) -> list[dict[str, Any]]:
    """One row per study: name, trial counts by state, feasible count, status, directions."""
    import optuna

    rows = []
    for s in storage.get_all_studies():
        trials = storage.get_all_trials(s._study_id, deepcopy=False)
        complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        rows.append(
            {
                "name": s.study_name,
                "trials": len(trials),
                "complete": len(complete),
                "feasible": sum(bool(t.user_attrs.get("feasible")) for t in complete),
                "running": sum(t.state == optuna.trial.TrialState.RUNNING for t in trials),
                "failed": sum(t.state == optuna.trial.TrialState.FAIL for t in trials),
                "status": s.user_attrs.get("status", "-"),
                "hypervolume": _last_hv(s.user_attrs.get("hv_history", [])),
                "directions": [d.name.lower() for d in s.directions],
            }
        )
    return rows


def _last_hv(history: Sequence[Sequence[float]]) -> float | None:
    return float(history[-1][1]) if history else None
