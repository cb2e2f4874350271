"""One module per CLI subcommand; each exposes ``add_parser(subparsers)`` and ``run(args)``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from dynosim.errors import DynosimError


@contextlib.contextmanager
def writing(flag: str, path: Path | str) -> Iterator[None]:
    """Turn an ``OSError`` while writing an output file into one line naming the flag and file."""
    try:
        yield
    except OSError as exc:
        raise DynosimError(f"{flag} {path}: {exc.strerror or exc}") from None
