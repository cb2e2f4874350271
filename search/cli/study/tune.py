"""``dynosim tune STUDY.yaml``: run a multi-objective autotuning study."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dynosim.errors import ConfigError
from search.cli.shared import invocation, make_console
from search.run.driver import RunState, run_study
from search.study.study_file import StudyFile, load_study_file
from search.study.workload import load_workload


def add_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tune``."""
    parser.add_argument("study", help="study file (experiments/*.yaml)")
    add_run_options(parser)
    parser.add_argument("--name", help="study name (default: the study file's)")
    parser.add_argument("--seed", type=int, help="seed of the optimizer and the simulations")
    parser.add_argument("--optimizer", help="optimizer name (see search.optimizers)")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``tune`` and ``resume``."""
    parser.add_argument("--storage", help="journal file, sqlite:///FILE or SQLAlchemy URL")
    parser.add_argument("--ray-address", help="join a Ray cluster: auto | HOST:PORT")
    parser.add_argument("--n-trials", type=int, help="trial budget (total, stored trials count)")
    parser.add_argument("--max-wall-s", type=float, help="wall-time budget of this run")
    parser.add_argument("--executor", choices=["ray", "local"], help="where simulations run")
    parser.add_argument("--num-cpus", type=int, help="CPUs of the local Ray runtime")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Study-file fields set by CLI flags (``None`` = not given)."""
    out = {
        "storage": args.storage,
        "executor.address": args.ray_address,
        "budget.max_trials": args.n_trials,
        "budget.max_wall_s": args.max_wall_s,
        "executor.kind": args.executor,
        "executor.num_cpus": args.num_cpus,
    }
    for key in ("name", "seed"):
        out[key] = getattr(args, key, None)
    if getattr(args, "optimizer", None):
        out["optimizer"] = {"name": args.optimizer}
    if args.ray_address:
        out["executor.kind"] = "ray"
    return out


def run(args: argparse.Namespace) -> int:
    """Load the study file and run the study."""
    import warnings

    from search.study.dry_run import unrunnable_values

    sf = load_study_file(args.study, overrides(args))
    for line in unrunnable_values(sf.problem, catalog=sf.simulator is None):
        warnings.warn(f"space: {line}", UserWarning, stacklevel=1)
    return execute(sf, resume=False, progress=not args.no_progress)


def execute(sf: StudyFile, *, resume: bool, progress: bool) -> int:
    """Load the workload, run (or resume) the study, print the outcome."""
    simulate_fn = resolve_simulator(sf.simulator)
    try:
        requests, warmup, wname = load_workload(sf.workload, sf.load)
    except ImportError as exc:
        raise ConfigError("workload", sf.data["workload"], f"a loadable workload ({exc})") from None
    with _progress(sf, progress) as update:
        state = run_study(
            sf,
            requests,
            warmup_requests=warmup,
            workload_name=wname,
            simulate_fn=simulate_fn,
            resume=resume,
            progress=update,
        )
    print_outcome(sf, state)
    return 0


def resolve_simulator(spec: str | None) -> Callable[..., Any] | None:
    """``module:function`` to the function; ``None`` means ``dynosim.simulate``.

    Raises:
        ConfigError: The function cannot be imported.
    """
    target = spec or "dynosim:simulate"
    module, _, attr = target.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("simulator", target, f"an importable function ({exc})") from None
    return fn if spec else None  # type: ignore[no-any-return,unused-ignore]


@contextmanager
def _progress(sf: StudyFile, enabled: bool) -> Iterator[Callable[[RunState], None] | None]:
    if not enabled:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("trials  feasible {task.fields[feasible]}  HV {task.fields[hv]:.4f}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(sf.name, total=sf.budget.max_trials, feasible=0, hv=0.0)

        def update(state: RunState) -> None:
            bar.update(
                task,
                completed=state.n_trials,
                feasible=state.n_feasible,
                hv=state.hypervolume,
            )

        yield update


def print_outcome(sf: StudyFile, state: RunState) -> None:
    """Status line, the Pareto front(s) and best lines (``outcome_blocks``), knob importance."""
    from search.results.counts import trial_counts
    from search.results.importance import knob_importances
    from search.results.outcome import outcome_blocks
    from search.results.tables import importance_table
    from search.store.open import load_study

    console = make_console()
    study = load_study(sf.storage, sf.name)
    counts = trial_counts(study.get_trials(deepcopy=False))
    refused = f" ({state.n_refused} refused unsimulated)" if state.n_refused else ""
    console.print(
        f"study [bold]{state.name}[/]: {state.status}; {counts.summary()}{refused}, "
        f"hypervolume {state.hypervolume:.4f}; storage {sf.storage}"
    )
    for block, plain in outcome_blocks(study):
        if plain:
            console.print(block, highlight=False, markup=False)
        else:
            console.print(block)
    console.print()
    console.print(importance_table(study.study_name, knob_importances(study)))
    command = f"{invocation()} report {shlex.quote(sf.name)} --storage {shlex.quote(sf.storage)}"
    console.print(f"reports (CSV, HTML): {command}", highlight=False)
    sys.stdout.flush()
