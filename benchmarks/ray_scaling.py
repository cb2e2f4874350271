"""Ray scaling: evaluations per minute with 1 and 2 Ray CPUs, and the parallel efficiency.

What it measures: the project's ``RayEvaluator`` on a local Ray runtime with ``num_cpus`` 1 and
2 evaluates the same fixed list of N configs (grid points of the benchmark study
``experiments/2026-12-search-efficiency/study.yaml`` that fit the GPU budget, shuffled with a
fixed seed: real simulations of the first 1,000 Mooncake conversation requests). For each
runtime it reports

* start-up: ``RayEvaluator(...)`` (``ray.init`` + putting the workload), not in the rate;
* warm-up: the first ``2 * num_cpus`` tasks (worker processes start, import, build step-time
  tables), not in the rate;
* the rate over the N configs, in two submission modes: ``driver`` keeps at most ``capacity``
  tasks in flight, as ``search.run.driver`` does; ``queued`` submits all N at once (Ray queues
  them), which removes the driver's round trip between a task's end and the next submission;
* the mean in-task time (``TrialResult.wall_s``), the Ray overhead per task
  (``(elapsed * cpus - sum of in-task time) / N``) and the driver process's CPU time.

Parallel efficiency = rate(2) / (2 * rate(1)). An in-process serial pass over the first
``--serial`` configs (no Ray) gives the simulation cost without any Ray in the way.

Run::

    .venv/bin/python benchmarks/ray_scaling.py             # N = 600 (~60 s a run at 1 CPU)
    .venv/bin/python benchmarks/ray_scaling.py --n 200 --modes driver
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from search.run.evaluate import EvalContext, evaluate_one, prepare  # noqa: E402
from search.study.space import Params  # noqa: E402
from search.study.study_file import load_study_file  # noqa: E402
from search.study.workload import load_workload  # noqa: E402
from search.trial import TrialResult, workload_id  # noqa: E402

DEFAULT_STUDY = ROOT / "experiments/2026-12-search-efficiency/study.yaml"
TARGET = 0.90


@dataclass(slots=True)
class Timing:
    """One timed pass over the configs."""

    cpus: int
    mode: str
    n: int
    elapsed_s: float
    task_s: float
    driver_cpu_s: float

    @property
    def per_min(self) -> float:
        """Evaluations per minute."""
        return 60.0 * self.n / self.elapsed_s

    @property
    def overhead_ms(self) -> float:
        """Slot time per task not spent inside ``evaluate_one``."""
        return 1e3 * (self.elapsed_s * self.cpus - self.task_s) / self.n


def run_pass(ev: Any, configs: Sequence[Params], mode: str) -> tuple[float, float, float]:
    """Evaluate ``configs`` on ``ev``.

    Args:
        ev: A started ``RayEvaluator``.
        configs: Knob values.
        mode: ``driver`` (at most ``capacity`` in flight) or ``queued`` (all submitted at once).

    Returns:
        ``(elapsed s, sum of in-task s, driver CPU s)``.
    """
    limit = ev.capacity if mode == "driver" else len(configs)
    todo = deque(enumerate(configs))
    results: list[TrialResult] = []
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    while todo or ev.in_flight:
        while todo and ev.in_flight < limit:
            tag, params = todo.popleft()
            ev.submit(tag, params)
        results.extend(r for _, r in ev.wait())
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    bad = [r.reason for r in results if not r.runnable]
    if bad:
        raise SystemExit(f"{len(bad)} evaluations did not run, e.g. {bad[0]}")
    return elapsed, sum(r.wall_s for r in results), cpu


def main() -> None:
    """Time 1 and 2 Ray CPUs and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--study", type=Path, default=DEFAULT_STUDY, help="benchmark study file")
    ap.add_argument("--n", type=int, default=600, help="configs per timed pass")
    ap.add_argument("--cpus", nargs="+", type=int, default=[1, 2], help="Ray runtimes to time")
    ap.add_argument("--modes", nargs="+", default=["driver", "queued"],
                    choices=["driver", "queued"], help="submission modes")  # fmt: skip
    ap.add_argument("--serial", type=int, default=100, help="in-process configs (0: skip)")
    ap.add_argument("--seed", type=int, default=0, help="shuffle seed of the config list")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()

    from search.run.ray_evaluator import RayEvaluator

    t_start = time.perf_counter()
    sf = load_study_file(args.study)
    requests, warmup, wname = load_workload(sf.workload, sf.load)
    ctx = EvalContext(
        problem=sf.problem,
        workload_id=workload_id(requests, wname),
        seed=sf.seed,
        warmup_requests=warmup,
    )
    points = [p for p in sf.problem.space.grid() if prepare(ctx, p).config is not None]
    order = np.random.default_rng(args.seed).permutation(len(points))
    points = [points[i] for i in order]
    warm_n = 2 * max(args.cpus)
    if len(points) < args.n + warm_n:
        raise SystemExit(f"only {len(points)} buildable grid points; use --n <= {len(points) - 4}")
    configs, warm = points[: args.n], points[args.n : args.n + warm_n]
    print(f"study: {args.study.name}; {len(requests)} requests; N = {args.n} configs "
          f"(buildable grid points, shuffled with seed {args.seed}); "
          f"machine: {os.cpu_count()} CPUs")  # fmt: skip

    serial_ms = None
    if args.serial:
        evaluate_one(ctx, warm[0], requests)  # step-time tables
        t0 = time.perf_counter()
        for p in configs[: args.serial]:
            evaluate_one(ctx, p, requests)
        serial_ms = 1e3 * (time.perf_counter() - t0) / args.serial
        print(f"in-process serial (no Ray), first {args.serial} configs: "
              f"{serial_ms:.1f} ms / evaluation = {60e3 / serial_ms:.0f} / min")  # fmt: skip

    timings: list[Timing] = []
    startup: dict[int, tuple[float, float]] = {}
    for cpus in args.cpus:
        t0 = time.perf_counter()
        ev = RayEvaluator(ctx, requests, num_cpus=cpus)
        t_init = time.perf_counter() - t0
        try:
            t0 = time.perf_counter()
            run_pass(ev, warm[: 2 * cpus], "queued")
            t_warm = time.perf_counter() - t0
            startup[cpus] = (t_init, t_warm)
            print(f"{cpus} CPU: start-up {t_init:.1f} s, warm-up ({2 * cpus} tasks) {t_warm:.1f} s",
                  flush=True)  # fmt: skip
            for mode in args.modes:
                elapsed, task_s, cpu = run_pass(ev, configs, mode)
                t = Timing(cpus, mode, len(configs), elapsed, task_s, cpu)
                timings.append(t)
                print(f"  {mode:<7} {elapsed:6.1f} s  {t.per_min:6.0f} / min  "
                      f"in-task {1e3 * task_s / t.n:5.1f} ms  "
                      f"overhead {t.overhead_ms:5.1f} ms/task  driver CPU {cpu:4.1f} s",
                      flush=True)  # fmt: skip
        finally:
            ev.close()

    print("\nRay CPUs  mode      evals/min  in-task ms  overhead ms/task  driver CPU %  efficiency")
    by = {(t.cpus, t.mode): t for t in timings}
    for t in timings:
        one = by.get((1, t.mode))
        eff = t.per_min / (t.cpus * one.per_min) if one else float("nan")
        cpu_pct = 100 * t.driver_cpu_s / t.elapsed_s
        print(f"{t.cpus:>8}  {t.mode:<8}  {t.per_min:9.0f}  {1e3 * t.task_s / t.n:10.1f}  "
              f"{t.overhead_ms:16.1f}  {cpu_pct:12.0f}  {eff:10.1%}")  # fmt: skip
    for mode in args.modes:
        one, two = by.get((1, mode)), by.get((2, mode))
        if one and two:
            eff = two.per_min / (2 * one.per_min)
            verdict = "MET" if eff >= TARGET else "MISSED"
            print(f"parallel efficiency ({mode}): {two.per_min:.0f} / (2 x {one.per_min:.0f}) = "
                  f"{eff:.1%} -> target {TARGET:.0%} {verdict}")  # fmt: skip
            slow = (two.task_s / two.n) / (one.task_s / one.n)
            print(f"  in-task time 2 CPU / 1 CPU: {slow:.3f} (CPU contention inside the tasks)")
    print(f"total wall time: {time.perf_counter() - t_start:.1f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        raw = {
            "serial_ms": serial_ms,
            "startup": {str(k): v for k, v in startup.items()},
            "timings": [_row(t) for t in timings],
        }
        args.json.write_text(json.dumps(raw, indent=1))


def _row(t: Timing) -> dict[str, Any]:
    return {
        "cpus": t.cpus,
        "mode": t.mode,
        "n": t.n,
        "elapsed_s": t.elapsed_s,
        "task_s": t.task_s,
        "driver_cpu_s": t.driver_cpu_s,
        "per_min": t.per_min,
        "overhead_ms": t.overhead_ms,
        "in_task_ms": 1e3 * t.task_s / t.n,
    }


if __name__ == "__main__":
    main()
