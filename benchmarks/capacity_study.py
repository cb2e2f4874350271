"""Cost of a capacity study: wall time and simulated requests per configuration.

Runs a capacity study (default: ``experiments/llama8b_mooncake_h200x16.yaml``, the full Mooncake
conversation trace) for ``--n-trials`` configurations on local Ray, in a fresh journal file, then
prints the wall time, configurations per minute, probes and simulated requests per configuration
(as a multiple of the trace length: "full runs"), and how the cost falls as the study learns
where capacities lie. Run: ``.venv/bin/python benchmarks/capacity_study.py [--n-trials 100]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from search.run.driver import run_study  # noqa: E402
from search.study.study_file import load_study_file  # noqa: E402
from search.study.workload import load_workload  # noqa: E402


def main() -> None:
    """Run the study and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--study", type=Path, default=ROOT / "experiments/llama8b_mooncake_h200x16.yaml"
    )
    ap.add_argument("--n-trials", type=int, default=100)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--executor", choices=["ray", "local"], default="ray")
    args = ap.parse_args()

    storage = str(Path(tempfile.mkdtemp()) / "capacity.journal")
    sf = load_study_file(
        args.study,
        {
            "name": "capacity-benchmark",
            "storage": storage,
            "budget.max_trials": args.n_trials,
            "budget.max_wall_s": 36_000,
            "budget.tol": 0.0,  # no plateau stop: evaluate every configuration asked for
            "executor.kind": args.executor,
            "executor.num_cpus": args.num_cpus,
        },
    )
    requests, warmup, name = load_workload(sf.workload, sf.load)
    t0 = time.perf_counter()
    state = run_study(sf, requests, warmup_requests=warmup, workload_name=name)
    wall = time.perf_counter() - t0

    import optuna

    from search.store.open import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=sf.name, storage=open_storage(storage))
    ran = [t for t in study.trials if t.user_attrs.get("metrics")]
    full = [t.user_attrs["metrics"]["capacity_full_runs"] for t in ran]
    probes = [t.user_attrs["metrics"]["capacity_probes"] for t in ran]
    sim = [t.user_attrs["metrics"]["capacity_simulated_requests"] for t in ran]
    caps = [t.user_attrs["metrics"]["load_level"] for t in ran if t.user_attrs["feasible"]]
    print(
        f"study: {args.study.name}, {len(requests):,} requests, {args.executor} x {args.num_cpus}"
    )
    print(f"trials: {state.n_trials} ({len(ran)} simulated, {state.n_feasible} feasible)")
    print(f"wall: {wall:,.0f} s ({len(ran) / wall * 60:,.1f} configurations per minute)")
    if not ran:
        return
    half = len(full) // 2
    print(
        f"per configuration: {statistics.mean(probes):.2f} probes, "
        f"{statistics.mean(sim):,.0f} simulated requests = {statistics.mean(full):.2f} full runs "
        f"(first half {statistics.mean(full[:half] or full):.2f}, "
        f"second half {statistics.mean(full[half:]):.2f}; median {statistics.median(full):.2f})"
    )
    if caps:
        print(f"capacities (trace speed-up): {min(caps):.2f} .. {max(caps):.2f}")


if __name__ == "__main__":
    main()
