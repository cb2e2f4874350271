"""``dynosim studies --storage URL``: list the studies in a storage."""

from __future__ import annotations

import argparse

from search.cli.shared import make_console
from search.store.open import open_storage, study_names
from search.study.study_file import DEFAULT_STORAGE


def add_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``studies``."""
    parser.add_argument(
        "--storage", default=DEFAULT_STORAGE, help=f"storage URL (default {DEFAULT_STORAGE})"
    )


def run(args: argparse.Namespace) -> int:
    """Print one row per study (counts as ``tune`` and ``report`` show them)."""
    from search.results.tables import studies_table

    console = make_console()
    # a missing file is an error, not a new storage
    if not study_names(open_storage(args.storage, create=False)):
        console.print(f"no studies in {args.storage}")
        return 0
    console.print(studies_table(args.storage))
    return 0
