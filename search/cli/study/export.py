"""``dynosim export NAME --trial N --storage URL``: a trial as launch commands + an AIPerf check."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynosim.errors import DynosimError
from search.cli.shared import writing
from search.study.study_file import DEFAULT_STORAGE

if TYPE_CHECKING:
    import optuna


def add_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``export``."""
    parser.add_argument("name", help="study name (see `dynosim studies`)")
    parser.add_argument("--trial", type=int, required=True, help="trial number (see the report)")
    parser.add_argument(
        "--storage",
        default=DEFAULT_STORAGE,
        help=f"journal file, sqlite:///FILE or SQLAlchemy URL (default {DEFAULT_STORAGE})",
    )
    parser.add_argument(
        "--format", choices=["text", "json"], default="text", help="output format (default text)"
    )
    parser.add_argument(
        "--out", type=Path, help="directory to write the TRT-LLM YAML(s) (trtllm backend) into"
    )
    parser.add_argument(
        "--load", type=float, metavar="LEVEL",
        help="load of the AIPerf check on the study's load axis (x trace rate, req/s or "
        "concurrency; default the study's own; a capacity study is also checked at capacity)",
    )  # fmt: skip
    parser.add_argument(
        "--aiperf-trace", type=Path, metavar="OUT.jsonl",
        help="write the study's workload as the Mooncake JSONL AIPerf replays; the check uses it",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Print the trial's launch commands and AIPerf command; write the YAML with ``--out``."""
    from dataclasses import replace

    from search.export import TrialInfo, export_trial, trial_metrics
    from search.store.open import load_study
    from search.store.schema import is_feasible

    study = load_study(args.storage, args.name)
    trial = find_trial(study, args.trial)
    config = trial.user_attrs.get("config")
    if not isinstance(config, dict) or not config:
        raise DynosimError(
            f"trial #{trial.number} of {args.name} stores no configuration "
            f"(state {trial.state.name})"
        )
    raw_study = study.user_attrs.get("study")
    study_dict: dict[str, Any] = raw_study if isinstance(raw_study, dict) else {}
    feasible = is_feasible(trial)
    reason = trial.user_attrs.get("infeasible_reason") or (
        None if feasible else "an SLO constraint is violated"
    )
    info = TrialInfo(
        study_name=args.name,
        number=trial.number,
        feasible=feasible,
        reason=str(reason) if reason else None,
        metrics=trial_metrics(trial.user_attrs.get("metrics")),
    )
    spec, spec_error = read_workload_spec(study_dict)
    out_dir = args.out if args.out is not None else Path(".")
    if args.load is not None and not (math.isfinite(args.load) and args.load > 0):
        raise DynosimError(f"--load: got {args.load}; allowed: a number > 0")
    trace_file = None
    if args.aiperf_trace is not None:
        n = write_aiperf_trace(study_dict, args.aiperf_trace)
        trace_file = str(args.aiperf_trace)
        print(f"# wrote {trace_file}: {n} requests (AIPerf mooncake_trace)", file=sys.stderr)
    export = export_trial(config, study_dict, info, workload_spec=spec, workload_error=spec_error,
                          yaml_dir=out_dir, load=args.load, trace_file=trace_file)  # fmt: skip
    if args.out is not None and export.yaml_files():
        written = []
        for name, text in export.yaml_files():
            path = Path(name)
            with writing("--out", args.out):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            written.append(str(path))
        export = replace(export, files=tuple(written))
    if args.format == "json":
        print(json.dumps(export.to_dict(), indent=2))
    else:
        print(export.to_text(), end="")
    return 0


def write_aiperf_trace(study: dict[str, Any], out: Path) -> int:
    """Write the study's workload, as the study reads it, to ``out``; return its requests.

    Raises:
        DynosimError: The study stores no workload, it cannot be loaded, or ``out`` cannot
            be written.
    """
    from search.export.trace import mooncake_jsonl
    from search.study.load import LoadSpec
    from search.study.workload import load_workload

    workload = study.get("workload")
    if not isinstance(workload, dict):
        raise DynosimError("--aiperf-trace: the study stores no workload to write")
    requests, _, _ = load_workload(workload, LoadSpec.from_dict(study.get("load")))
    with writing("--aiperf-trace", out):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(mooncake_jsonl(requests))
    return len(requests)


def find_trial(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    """The trial numbered ``number``.

    Raises:
        DynosimError: No such trial.
    """
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.number == number:
            return t
    span = f"0-{max(t.number for t in trials)}" if trials else "none"
    raise DynosimError(f"study {study.study_name} has no trial #{number} (trials: {span})")


def read_workload_spec(study: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The synthetic workload file of a ``{file: PATH}`` study, parsed; or why it is not.

    A file that is gone is a note of the export; one that is there but no longer valid (edited
    after the study ran) is refused as ``simulate`` would refuse it (``WorkloadError``: one
    line naming the file and the field).
    """
    import yaml

    from dynosim.workload import parse_workload_file

    workload = study.get("workload")
    if not isinstance(workload, dict) or "file" not in workload:
        return None, None
    path = Path(str(workload["file"]))
    try:
        text = path.read_bytes()
    except OSError as exc:
        return None, str(exc.strerror or exc)
    parse_workload_file(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, f"invalid YAML: {type(exc).__name__}"
    if not isinstance(data, dict):
        return None, "not a mapping of workload fields"
    return data, None
