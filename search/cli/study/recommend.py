"""``dynosim recommend``: one question in one command, answered by a quick capacity study.

"Which configurations of MODEL on N GPUs carry the most traffic within my TTFT and ITL SLOs,
and how do I launch them?" The command writes a study file (and, for ``--isl/--osl``, a
workload file) under ``runs/recommend/``, runs it as ``dynosim tune`` would (so it is stored,
reported and resumable like any study: ``dynosim resume NAME``), then prints the best
configurations by capacity per GPU with their launch commands (``dynosim export``).

The standard space: aggregated (TP up to 8, workers = N // TP) or disaggregated (each pool's TP
and worker count), the three backends, round-robin or KV-aware routing (least-loaded or KV-load
decode routing), and the batch limits. Each configuration is judged at its capacity: the
highest load at which TTFT p90 and ITL p90 hold. A trace is replayed faster or slower; fixed
``--isl/--osl`` prompts arrive as a Poisson process whose rate is searched.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import yaml

from dynosim.errors import ConfigError
from search.study.study_file import DEFAULT_STORAGE

OUT_DIR = Path("runs/recommend")
"""Where the generated study and workload files go (relative to the working directory)."""
TP_CHOICES = (1, 2, 4, 8)
ENGINE_KNOBS: dict[str, dict[str, Any]] = {
    "engine.max_num_seqs": {"type": "choice", "values": [32, 64, 128, 256, 512]},
    "engine.max_num_batched_tokens": {"type": "choice", "values": [2048, 8192, 16384]},
}


def add_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``recommend``."""
    parser.add_argument("--model", required=True, help="model id or a config.json path")
    parser.add_argument("--gpu", required=True, help="GPU (see `dynosim gpus`)")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs to use at most")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, help="request trace (Mooncake JSONL, Azure CSV, ...)")
    src.add_argument("--isl", type=int, help="input tokens per request (with --osl)")
    parser.add_argument("--osl", type=int, help="output tokens per request (with --isl)")
    parser.add_argument("--ttft-ms", type=float, required=True, help="TTFT p90 SLO (ms)")
    parser.add_argument("--itl-ms", type=float, required=True, help="ITL p90 SLO (ms)")
    parser.add_argument("--requests", type=int, default=400, help="requests per simulation")
    parser.add_argument("--trials", type=int, default=24, help="configurations to evaluate")
    parser.add_argument("--max-wall-s", type=float, default=60.0, help="wall-time budget (s)")
    parser.add_argument("--top", type=int, default=3, help="configurations to print (default 3)")
    parser.add_argument("--executor", choices=["ray", "local"], default="ray")
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="study storage")
    parser.add_argument("--name", help="study name (default: recommend-<model>-<time>)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Write the study, run it, print the best configurations and their launch commands."""
    from search.cli.study import export
    from search.cli.study.tune import execute
    from search.study.study_file import load_study_file

    _check(args)
    name = args.name or f"recommend-{_slug(args.model)}-{time.strftime('%Y%m%d-%H%M%S')}"
    path = write_study(args, name)
    print(f"study file: {path} (resume with: dynosim resume {name} --storage {args.storage})")
    sf = load_study_file(path)
    execute(sf, resume=False, progress=not args.no_progress)
    best = best_trials(args.storage, name, args.top)
    if not best:
        print("no configuration met the SLOs: loosen them, add GPUs, or raise --trials")
        return 1
    for rank, number in enumerate(best, 1):
        print(f"\n=== recommendation {rank}: trial #{number} ===")
        parser = argparse.ArgumentParser(prog="dynosim export")
        export.add_parser(parser)  # the export command's own defaults
        export.run(parser.parse_args([name, "--trial", str(number), "--storage", args.storage]))
    return 0


def _check(args: argparse.Namespace) -> None:
    """Flag values, before anything is written or run."""
    if (args.isl is None) != (args.osl is None):
        missing = "--osl" if args.osl is None else "--isl"
        raise ConfigError(missing, None, "--isl and --osl together")
    for flag, value, low in (
        ("--gpus", args.gpus, 1),
        ("--requests", args.requests, 10),
        ("--trials", args.trials, 1),
        ("--top", args.top, 1),
        ("--isl", args.isl, 1),
        ("--osl", args.osl, 1),
    ):
        if value is not None and value < low:
            raise ConfigError(flag, value, f"an integer >= {low}")
    for flag, ms in (("--ttft-ms", args.ttft_ms), ("--itl-ms", args.itl_ms)):
        if not 0 < ms < 1e9:
            raise ConfigError(flag, ms, "a number of milliseconds > 0")
    if not 0 < args.max_wall_s < 1e7:
        raise ConfigError("--max-wall-s", args.max_wall_s, "a number of seconds > 0")
    if args.trace is not None and not args.trace.is_file():
        raise ConfigError("--trace", str(args.trace), "an existing trace file")


def standard_space(gpus: int) -> dict[str, Any]:
    """The space ``recommend`` searches for ``gpus`` GPUs (disaggregation from 2 GPUs)."""
    tps = [t for t in TP_CHOICES if t <= gpus]
    knobs: dict[str, Any] = {
        "backend": {"type": "choice", "values": ["vllm", "sglang", "trtllm"]},
        "router": {"type": "choice", "values": ["round_robin", "kv_aware"]},
        **ENGINE_KNOBS,
    }
    if gpus < 2:
        knobs["tp"] = {"type": "choice", "values": tps}
        return {"description": f"recommend: {gpus} GPU, aggregated", "knobs": knobs}
    agg = {"mode": "agg"}
    dis = {"mode": "disagg"}
    knobs = {
        "mode": {"type": "choice", "values": ["agg", "disagg"]},
        "tp": {"type": "choice", "values": tps, "when": agg},
        "prefill.tp": {"type": "choice", "values": tps, "when": dis},
        "prefill.workers": {"type": "int", "low": 1, "high": gpus - 1, "when": dis},
        "decode.tp": {"type": "choice", "values": tps, "when": dis},
        "decode.workers": {"type": "int", "low": 1, "high": gpus - 1, "when": dis},
        "decode_router": {"type": "choice", "values": ["least_loaded", "kv_load"], "when": dis},
        **knobs,
    }
    return {"description": f"recommend: {gpus} GPUs, aggregated or disaggregated", "knobs": knobs}


def write_study(args: argparse.Namespace, name: str) -> Path:
    """The study (and workload) file of the question; returns the study file's path."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    workload: dict[str, Any]
    if args.trace is not None:
        workload = {"trace": str(args.trace.resolve()), "max_requests": args.requests}
    else:
        spec = {
            "requests": args.requests,
            "arrival": {"process": "poisson", "rate_rps": 1.0},
            "input_tokens": {"dist": "fixed", "value": args.isl},
            "output_tokens": {"dist": "fixed", "value": args.osl},
            "seed": args.seed,
        }
        wpath = OUT_DIR / f"{name}.workload.yaml"
        wpath.write_text(yaml.safe_dump(spec, sort_keys=False))
        workload = {"file": str(wpath.resolve())}
    slo = {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms}
    study = {
        "name": name,
        "model": args.model,
        "gpu": args.gpu,
        "gpu_budget": args.gpus,
        "deployment": {"timing": "aic", "slo": slo},
        "workload": workload,
        "load": {"mode": "capacity", "tolerance": 0.1},
        "space": standard_space(args.gpus),
        "objectives": [
            {"metric": "capacity_output_tokens_per_s_per_gpu", "direction": "maximize"},
            {"metric": "output_token_throughput_per_user", "direction": "maximize"},
        ],
        "constraints": [
            f"time_to_first_token.p90 <= {args.ttft_ms:g}",
            f"inter_token_latency.p90 <= {args.itl_ms:g}",
        ],
        "optimizer": {"name": "optuna-nsga2", "population": 8},
        "budget": {"max_trials": args.trials, "max_wall_s": args.max_wall_s},
        "executor": {"kind": args.executor, "num_cpus": 2},
        "storage": args.storage if "://" in args.storage else str(Path(args.storage).resolve()),
        "seed": args.seed,
    }
    path = OUT_DIR / f"{name}.yaml"
    path.write_text(f"# written by `dynosim recommend`\n{yaml.safe_dump(study, sort_keys=False)}")
    return path


def best_trials(storage: str, name: str, top: int) -> list[int]:
    """The ``top`` feasible trials by capacity per GPU, one per distinct result."""
    from search.store.open import load_study
    from search.store.schema import is_feasible

    study = load_study(storage, name)
    feasible = [t for t in study.get_trials(deepcopy=False) if is_feasible(t)]
    feasible.sort(key=lambda t: (-t.values[0], -t.values[1], t.number))
    out: list[int] = []
    seen: set[tuple[float, ...]] = set()
    for t in feasible:
        key = tuple(t.values)
        if key not in seen:
            seen.add(key)
            out.append(t.number)
        if len(out) == top:
            break
    return out


def _slug(model: str) -> str:
    tail = model.rstrip("/").rsplit("/", 1)[-1]
    return "".join(c if c.isalnum() else "-" for c in tail).strip("-").lower() or "model"
