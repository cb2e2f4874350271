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
import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
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


def spinner(console: Any, text: str) -> AbstractContextManager[Any]:
    """``console.status(text)`` on a terminal; elsewhere nothing.

    Rich shows no spinner on a pipe anyway, and its live-display modules then need not be
    imported (about 5 ms of a process's start-up).
    """
    return console.status(text) if console.is_terminal else contextlib.nullcontext()


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


def check_groups(
    texts: Sequence[str], groups: Sequence[tuple[str, str, str, str]], path: object
) -> None:
    """Refuse a ``--group`` that names no row of the file (else it would be silently ignored).

    Raises:
        DynosimError: the first such ``--group``, with a group the file does have.
    """
    for text in texts:
        want = group_filter(text)
        if not any(matches(g, want) for g in groups):
            some = "/".join(groups[0][:3]) if groups else "none"
            raise DynosimError(f"--group: got {text!r}, which names no row of {path}; allowed: "
                               f"MODEL/SYSTEM/BACKEND of its rows (e.g. {some})")  # fmt: skip


TRACE_SUFFIXES = (".csv", ".jsonl", ".json")
"""Suffixes of request traces (Mooncake JSONL, Azure or generic CSV): ``--trace`` files."""


def refuse_trace_as_workload(path: Path) -> None:
    """A trace given as ``--workload`` is one line saying to use ``--trace``.

    Raises:
        DynosimError: ``path`` is a trace file (by its suffix, or a first line that is a JSON
            object as a Mooncake trace's is).
    """
    first = ""
    with contextlib.suppress(OSError, UnicodeDecodeError), open(path, encoding="utf-8") as f:
        first = next((line.strip() for line in f if line.strip()), "")
    if path.suffix.lower() in TRACE_SUFFIXES or first.startswith("{"):
        raise DynosimError(
            f"--workload {path}: a request trace, not a workload YAML; use --trace {path}"
        )


SLO_FLOORS_MS = {"ttft": 5.0, "itl": 1.0}
"""Latency SLOs below these (ms) are most likely a unit mistake (seconds written as ms): a
decode step reads every weight of its GPU, and Llama-3.1-8B's 16 GB take 3.3 ms at H200's 4.8
TB/s; a TTFT adds a prefill and the network round trip. Only a warning: a small model split
over many GPUs can step faster."""


def slo_unit_warnings(values: dict[str, float]) -> list[str]:
    """One warning for each latency SLO or constraint implausibly small in milliseconds.

    ``values``: ``name -> value in ms`` (``slo.ttft_ms``, ``time_to_first_token.p90 <= ...``).
    """
    out = []
    for name, value in values.items():
        kind = "ttft" if "ttft" in name or "time_to_first_token" in name else None
        if "itl" in name or "inter_token_latency" in name or "tpot" in name:
            kind = "itl"
        if kind is None or not 0 < value < SLO_FLOORS_MS[kind]:
            continue
        out.append(
            f"{name} = {value:g} ms is below {SLO_FLOORS_MS[kind]:g} ms, which LLM deployments "
            f"rarely reach: was it meant in seconds ({value:g} s = {value * 1000:g} ms)?"
        )
    return out


def study_unit_warnings(study: Path) -> list[str]:
    """:func:`slo_unit_warnings` for a study file's SLOs and latency constraints.

    Read before the study runs; a file that does not load gives none (the run reports why).
    """
    from search.study.study_file import load_study_file

    try:
        sf = load_study_file(study, {})
    except (DynosimError, OSError):
        return []
    deployment = sf.data.get("deployment")
    slos = {
        "slo": sf.data.get("slo"),
        "deployment.slo": deployment.get("slo") if isinstance(deployment, dict) else None,
    }
    values: dict[str, float] = {}
    for where, slo in slos.items():
        if isinstance(slo, dict):
            values |= {
                f"{where}.{k}": float(v)
                for k, v in slo.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            }
    for c in sf.problem.constraint_dicts():  # slo_unit_warnings keeps the latency ones
        values[f"constraint {c['metric']} {c['op']} {c['value']:g}"] = float(c["value"])
    return slo_unit_warnings(values)


def invocation() -> str:
    """The command as the user ran it: ``.venv/bin/dynosim``, ``dynosim`` or ``python -m ...``.

    Next-step hints print this, so that they work when ``dynosim`` is not on the PATH (a
    Makefile's venv).
    """
    prog = sys.argv[0] if sys.argv and sys.argv[0] else "dynosim"
    if Path(prog).name in ("__main__.py", "-c", "-m"):
        python = Path(sys.executable)
        with contextlib.suppress(ValueError):
            python = python.relative_to(Path.cwd())
        return f"{shlex.quote(str(python))} -m search.cli"
    return shlex.quote(prog)
