"""``dynosim studies --storage URL``: list the studies in a storage."""

from __future__ import annotations

import argparse

from search.storage import open_storage, study_rows
from search.study_file import DEFAULT_STORAGE


def add_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``studies``."""
    parser.add_argument(
        "--storage", default=DEFAULT_STORAGE, help=f"storage URL (default {DEFAULT_STORAGE})"
    )


def run(args: argparse.Namespace) -> int:
    """Print one row per study."""
    from rich.table import Table

    from search.terminal import make_console

    console = make_console()
    open_storage(args.storage, create=False)  # a missing file is an error, not a new storage
    try:
        from search.studies_listing import studies_table
    except ImportError:
        pass
    else:
        console.print(studies_table(args.storage))
        return 0
    rows = study_rows(open_storage(args.storage, create=False))
    if not rows:
        console.print(f"no studies in {args.storage}")
        return 0
    table = Table(title=f"studies in {args.storage}")
    for col in ("name", "status", "trials", "complete", "feasible", "running", "failed", "HV"):
        table.add_column(col, justify="left" if col in ("name", "status") else "right")
    for r in rows:
        hv = "-" if r["hypervolume"] is None else f"{r['hypervolume']:.4f}"
        cells = [r["name"], r["status"], *(str(r[k]) for k in
                 ("trials", "complete", "feasible", "running", "failed")), hv]  # fmt: skip
        table.add_row(*cells)
    console.print(table)
    return 0
