"""What several subcommands share: output-file errors, the console, measurement selection.

``writing`` turns an ``OSError`` into one line naming the flag; ``make_console`` is the terminal
the CLI prints to; ``group_filter``/``matches`` select measurement groups (``--group``) and
``add_context_arguments``/``measurement_context`` give tool result files what they do not record
(``validate`` and ``calibrate``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dynosim.errors import DynosimError
from dynosim.perf.calibration import UNRECORDED_CLIENTS


@contextlib.contextmanager
def writing(flag: str, path: Path | str) -> Iterator[None]:
    """Turn an ``OSError`` while writing an output file into one line naming the flag and file."""
    try:
        yield
    except OSError as exc:
        raise DynosimError(f"{flag} {path}: {exc.strerror or exc}") from None


def make_console() -> Any:
    """A rich console; piped output gets 160 columns so tables are not squeezed into 80."""
    from rich.console import Console

    wide = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160
    return Console(width=wide)


def add_context_arguments(p: argparse.ArgumentParser) -> None:
    """``--deployment`` and ``--concurrency``: what a tool's result file does not record."""
    p.add_argument(
        "--deployment",
        type=Path,
        metavar="D.yaml",
        help="model, gpu, backend, tp, dtype of AIPerf / vLLM bench result files",
    )
    p.add_argument("--concurrency", type=int,
                   help="client concurrency of an AIPerf CSV (its JSON records it)")  # fmt: skip
    p.add_argument("--unrecorded-client", choices=UNRECORDED_CLIENTS, default=None,
                   help="replay rows that record no client as this (default: the profile's "
                   "choice per backend; calibrate: try both)")  # fmt: skip


def measurement_context(args: argparse.Namespace) -> dict[str, Any]:
    """The context for tool result files from ``--deployment`` and ``--concurrency``."""
    out: dict[str, Any] = {}
    if getattr(args, "deployment", None) is not None:
        from dynosim.files import load_deployment

        d = load_deployment(args.deployment)
        out |= {"model": d.model, "gpu": d.gpu, "backend": d.backend, "tp": d.tp,
                "dtype": d.dtype}  # fmt: skip
    if getattr(args, "concurrency", None) is not None:
        if args.concurrency < 1:
            raise DynosimError(f"--concurrency: got {args.concurrency}; allowed: an integer >= 1")
        out["concurrency"] = args.concurrency
    return out


def group_filter(text: str) -> tuple[str, str, str]:
    """A ``--group`` value as ``(model, system, backend)``; an empty part matches any."""
    parts = text.split("/")
    if len(parts) == 2:  # a Hugging Face id has a slash itself: ORG/NAME
        parts = [text, "", ""]
    if len(parts) == 4:
        parts = ["/".join(parts[:2]), parts[2], parts[3]]
    if len(parts) != 3:
        raise DynosimError(f"--group: got {text!r}; allowed: MODEL/SYSTEM/BACKEND")
    return (parts[0], parts[1], parts[2])


def matches(group: tuple[str, str, str, str], want: tuple[str, str, str]) -> bool:
    """Whether a measurement's ``group`` is the one ``want`` (from :func:`group_filter`) names."""
    return all(not w or w == g for w, g in zip(want, group[:3], strict=True))
