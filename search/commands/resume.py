"""``dynosim resume NAME --storage URL``: continue a stored study after a stop or a crash."""

from __future__ import annotations

import argparse

from dynosim.errors import ConfigError
from search.commands.tune import add_run_options, execute, overrides
from search.storage import open_storage, study_names
from search.study_file import apply_overrides, parse_study


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
    sid = storage.get_study_id_from_name(args.name)
    data = storage.get_study_user_attrs(sid).get("study")
    if not isinstance(data, dict):
        raise ConfigError("name", args.name, "a study created by `dynosim tune`")
    sf = parse_study(apply_overrides(data, overrides(args)), source=f"study {args.name}")
    return execute(sf, resume=True, progress=not args.no_progress)
