"""``dynosim resume NAME --storage URL``: continue a stored study after a stop or a crash.

A study that converged or used its budget runs nothing unless it is given a larger budget:
``--n-trials`` above the trials it completed, or a new ``--max-wall-s``.
"""

from __future__ import annotations

import argparse
from typing import Any

from dynosim.errors import ConfigError, DynosimError
from search.cli.study.tune import add_run_options, execute, overrides
from search.results.counts import TrialCounts, trial_counts
from search.store.lease import refuse_if_held
from search.store.open import open_storage, study_names
from search.store.record import StudyRecord
from search.study.study_file import apply_overrides, parse_study

FINISHED = {"converged": "converged (hypervolume plateau)", "budget": "used its budget"}


def add_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``resume``."""
    parser.add_argument("name", help="study name")
    add_run_options(parser)


def run(args: argparse.Namespace) -> int:
    """Reload the stored study file, apply overrides, continue the study."""
    if not args.storage:
        raise ConfigError("--storage", None, "the storage URL holding the study")
    storage = open_storage(args.storage, create=False)
    if args.name not in study_names(storage):
        names = ", ".join(study_names(storage)) or "none"
        raise ConfigError("name", args.name, f"a study in {args.storage} ({names})")
    record = StudyRecord(storage, args.name, url=args.storage)
    refuse_if_held(record)  # before a long load
    attrs = record.user_attrs
    data = attrs.get("study")
    if not isinstance(data, dict):
        if record.unfinished_creation():
            raise DynosimError(
                f"study {args.name!r} in {args.storage} was interrupted while it was being "
                "created, before anything ran: start it again with `dynosim tune STUDY.yaml "
                f"--name {args.name} --storage {args.storage}`"
            )
        raise ConfigError("name", args.name, "a study created by `dynosim tune`")
    sf = parse_study(apply_overrides(data, overrides(args)), source=f"study {args.name}")
    counts = trial_counts(record.trials())
    reason = nothing_to_run(args.name, attrs, counts, args.n_trials, args.max_wall_s)
    if reason is not None:
        print(reason)
        return 0
    return execute(sf, resume=True, progress=not args.no_progress)


def nothing_to_run(
    name: str,
    attrs: dict[str, Any],
    counts: TrialCounts,
    n_trials: int | None,
    max_wall_s: float | None,
) -> str | None:
    """Why resuming the study would run nothing, or ``None`` if it has work left.

    A converged or budget-exhausted study has work only with a new wall-time budget or a trial
    budget above its completed trials (trials left running by a crash are re-run either way).
    """
    status = str(attrs.get("status", ""))
    if status not in FINISHED or max_wall_s is not None or counts.running:
        return None
    if n_trials is not None and n_trials > counts.complete:
        return None
    given = "" if n_trials is None else f" (--n-trials {n_trials} is not above that)"
    return (
        f"study {name} {FINISHED[status]}: {counts.summary()}{given}; nothing to run. "
        f"Give --n-trials above {counts.complete} or --max-wall-s to run more"
    )
