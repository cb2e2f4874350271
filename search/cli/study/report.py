"""``dynosim report NAME --storage URL [--out DIR]``: Pareto table, best config per SLO, files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from search.cli.shared import make_console, writing
from search.study.study_file import DEFAULT_STORAGE

if TYPE_CHECKING:
    import optuna


def add_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``report``."""
    parser.add_argument("name", help="study name (see `dynosim studies`)")
    parser.add_argument(
        "--storage",
        default=DEFAULT_STORAGE,
        help=f"journal file, sqlite:///FILE or SQLAlchemy URL (default {DEFAULT_STORAGE})",
    )
    parser.add_argument(
        "--out", type=Path, help="directory for CSV and HTML files (default runs/report-NAME)"
    )


def run(args: argparse.Namespace) -> int:
    """Print the summary, Pareto front, best config per SLO and knob importance; write files."""
    from search.results.importance import knob_importances
    from search.results.outcome import outcome_blocks
    from search.results.tables import importance_table
    from search.results.write import write_report
    from search.store.open import load_study

    study = load_study(args.storage, args.name)
    console = make_console()
    console.print(study_summary(study) + "\n", highlight=False, markup=False)
    for block, plain in outcome_blocks(study):
        if plain:
            console.print(f"  {block}", highlight=False, markup=False)
        elif block.row_count:
            console.print(block)
        else:
            console.print(f"[yellow]{block.title}: no feasible trial[/yellow]")
    console.print()
    importances = knob_importances(study)
    console.print(importance_table(study.study_name, importances))
    out = args.out if args.out is not None else Path("runs") / f"report-{args.name}"
    with writing("--out", out):
        paths = write_report(study, out, importances=importances)
    console.print("\nwrote " + "  ".join(str(p) for p in paths.values()), highlight=False)
    return 0


def study_summary(study: optuna.Study) -> str:
    """A few lines: status, trial counts, hypervolume, objectives, SLOs, why trials failed."""
    from collections import Counter

    import optuna

    from search.results.counts import trial_counts
    from search.results.labels import constraint_label, metric_label
    from search.store.schema import is_feasible, slo_constraints
    from search.store.schema import study_objectives as objectives

    trials = study.get_trials(deepcopy=False)
    ts = optuna.trial.TrialState
    history = study.user_attrs.get("hv_history") or []
    hv = f", hypervolume {history[-1][1]:.4f} after {history[-1][0]} trials" if history else ""
    objs = ", ".join(f"{d} {metric_label(m)}" for m, d in objectives(study))
    slos = ", ".join(constraint_label(c) for c in slo_constraints(study)) or "none"
    status = study.user_attrs.get("status", "-")
    lines = [
        f"study {study.study_name}: {status}; {trial_counts(trials).summary()}{hv}",
        f"objectives: {objs}; SLOs: {slos}",
    ]
    reasons = Counter(
        " ".join(str(t.user_attrs.get("infeasible_reason") or "constraint violated").split())[:100]
        for t in trials
        if t.state == ts.COMPLETE and not is_feasible(t)
    )
    if reasons:
        top = "; ".join(f"{n}x {r}" for r, n in reasons.most_common(3))
        lines.append(f"infeasible: {top}")
    return "\n".join(lines)
