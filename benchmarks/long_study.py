"""Long studies stay flat: driver overhead, memory and report time at 1k and 10k trials.

Runs one study of ``--n-trials`` trials (default 10,000) on Optuna's journal storage with the
local executor and a cheap simulator stand-in (``tests/unit/search/fakes.py``: microseconds a
call), so what is measured is the driver itself: ask, dedupe, store, tell, hypervolume. Prints
the mean wall time per trial over the trials just before 1,000 and just before the last one,
their ratio, the driver's resident memory at both points, and the wall time of
``dynosim report`` (a subprocess: the command as a user runs it) at the end. Targets (issue 10):
per-trial overhead grows by less than 2x from 1k to 10k trials; ``report`` of 10k trials
under 10 s. Run: ``.venv/bin/python benchmarks/long_study.py [--n-trials 10000]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from search.run.driver import RunState, run_study  # noqa: E402
from search.study.study_file import parse_study  # noqa: E402
from tests.unit.search import fakes  # noqa: E402

SPACE = {
    "knobs": {
        "tp": {"type": "choice", "values": [1, 2, 4]},
        "router": {"type": "choice", "values": ["round_robin", "kv_aware"]},
        "kv_router.overlap_weight": {
            "type": "float", "low": 0.0, "high": 2.0, "when": {"router": "kv_aware"},
        },
        "engine.max_num_seqs": {"type": "int", "low": 16, "high": 1024, "log": True},
        "engine.gpu_memory_utilization": {"type": "float", "low": 0.5, "high": 0.95},
    }
}  # fmt: skip
"""Continuous knobs: practically every proposal is a new configuration."""
WINDOW = 200


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    """Run the study, then the report, and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n-trials", type=int, default=10_000)
    ap.add_argument("--optimizer", default="optuna-nsga2")
    args = ap.parse_args()
    n = args.n_trials
    folder = Path(tempfile.mkdtemp())
    storage = str(folder / "long.journal")
    data = fakes.study_dict(
        folder,
        name="long",
        space=SPACE,
        workload={"trace": "unused.jsonl"},
        optimizer={"name": args.optimizer, "population": 50},
        budget={"max_trials": n, "tol": 0.0, "patience": 1_000_000},
        storage=storage,
    )
    sf = parse_study(data, base_dir=folder)
    stamps: list[float] = []
    rss: dict[int, float] = {}

    def progress(state: RunState) -> None:
        stamps.append(time.perf_counter())
        if state.n_trials in (1000, n):
            rss[state.n_trials] = _rss_mib()

    t0 = time.perf_counter()
    state = run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate, progress=progress)
    wall = time.perf_counter() - t0

    def per_trial_ms(end: int) -> float:
        end = min(end, len(stamps))
        return (stamps[end - 1] - stamps[end - 1 - WINDOW]) / WINDOW * 1e3

    print(f"{state.n_trials:,} trials ({state.n_duplicates:,} duplicates told) in {wall:,.1f} s")
    early, late = per_trial_ms(1000), per_trial_ms(len(stamps))
    print(
        f"driver overhead per trial: {early:.2f} ms at 1k, {late:.2f} ms at {len(stamps):,} "
        f"(x{late / early:.2f}; target < 2)"
    )
    at_1k, at_end = rss.get(1000, float("nan")), rss.get(n, _rss_mib())
    print(f"driver RSS: {at_1k:.0f} MiB at 1k, {at_end:.0f} MiB at the end")
    cmd = [
        str(ROOT / ".venv/bin/dynosim"), "report", "long", "--storage", storage,
        "--out", str(folder / "report"),
    ]  # fmt: skip
    t1 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    print(
        f"dynosim report of {state.n_trials:,} trials: {time.perf_counter() - t1:.1f} s "
        f"(exit {done.returncode}; target < 10 s)"
    )
    if done.returncode:
        print(done.stderr[-2000:])


if __name__ == "__main__":
    main()
