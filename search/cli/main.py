"""The ``dynosim`` command line: the one place where strings become objects.

Every subcommand is a module with ``add_parser`` and ``run``: the simulator's own commands in
``search/cli/simulator/``, the autotuner's in ``search/cli/study/`` (:data:`COMMANDS` maps each
name to its module and help text). They are imported lazily so that ``dynosim simulate`` does not
pay for optuna, pymoo or ray. Bad input (``DynosimError``) becomes a one-line message on stderr
and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from dynosim.errors import DynosimError

COMMANDS = {
    "simulate": (
        "simulator.simulate",
        "Simulate one deployment on a workload and print its metrics.",
    ),
    "tune": ("study.tune", "Run a multi-objective autotuning study from a study file."),
    "resume": ("study.resume", "Continue a stored study after a stop or a crash."),
    "report": ("study.report", "Print a study's Pareto front and write CSV/HTML reports."),
    "studies": ("study.studies", "List the studies in a storage."),
    "export": (
        "study.export",
        "Print a trial as launch commands for its backend and an AIPerf check.",
    ),
    "recommend": (
        "study.recommend",
        "Answer 'what carries my traffic within my SLOs?' with a quick capacity study.",
    ),
    "validate": (
        "simulator.validate",
        "Replay measured benchmark points in the simulator and report the error.",
    ),
    "calibrate": (
        "simulator.calibrate",
        "Fit a calibration profile (step and host overheads) to measurements.",
    ),
    "models": ("simulator.catalog", "List the models that can be simulated."),
    "gpus": ("simulator.catalog", "List the GPUs, their specs and the price used for cost."),
    "backends": ("simulator.catalog", "List the backends and where AIConfigurator has data."),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; the subcommand modules add their own arguments.

    Only ``command``'s module is imported (all of them when ``None``), so ``dynosim simulate``
    does not import the autotuner's modules just to list their options.
    """
    parser = argparse.ArgumentParser(prog="dynosim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if command is not None and name != command:
            continue
        module = _command_module(name)
        if module is not None:
            module.add_parser(p)
    return parser


def _command_module(name: str):  # type: ignore[no-untyped-def]
    path = f"search.cli.{COMMANDS[name][0]}"
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name == path:
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dynosim`` script."""
    words = list(sys.argv[1:] if argv is None else argv)
    chosen = next((w for w in words if not w.startswith("-")), None)
    args = build_parser(chosen if chosen in COMMANDS else None).parse_args(words)
    module = _command_module(args.command)
    assert module is not None
    warnings.showwarning = _one_line(args.command)
    try:
        if args.command == "tune":  # before a long run: latency targets written in seconds
            from search.cli.shared import study_unit_warnings

            for line in study_unit_warnings(Path(args.study)):
                warnings.warn(line, UserWarning, stacklevel=1)
        return int(module.run(args) or 0)
    except DynosimError as exc:
        print(f"dynosim {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = resume_hint(args) if args.command in ("tune", "resume") else ""
        print(f"dynosim {args.command}: interrupted{hint}", file=sys.stderr)
        return 130


def _one_line(command: str):  # type: ignore[no-untyped-def]
    """Print warnings as ``dynosim COMMAND: warning: MESSAGE`` (no source line)."""

    def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        print(f"dynosim {command}: warning: {message}", file=file or sys.stderr)

    return show


def resume_hint(args: argparse.Namespace) -> str:
    """What to run to continue the study an interrupted ``tune`` or ``resume`` was running."""
    from search.cli.shared import invocation
    from search.cli.study import tune
    from search.store.open import open_storage, study_names
    from search.study.study_file import load_study_file

    try:
        if args.command == "tune":
            sf = load_study_file(args.study, tune.overrides(args))
            name, storage = sf.name, sf.storage
        else:
            name, storage = args.name, args.storage
        stored = name in study_names(open_storage(storage, create=False))
    except (DynosimError, OSError):
        return ""
    if not stored:
        return "; nothing was stored: run the same command again"
    cmd = f"{invocation()} resume {shlex.quote(name)} --storage {shlex.quote(storage)}"
    return f"; continue with: {cmd}"
