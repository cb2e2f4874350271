"""Fit the per-backend framework overhead by replaying real-GPU benchmarks in the simulator.

The overhead model is ``base_us + per_request_us * requests_in_step`` added to every engine
step (``dynosim/perf/overhead.py``). It is fitted ONLY on these groups of AIConfigurator's
``silicon_sample.csv`` (closed-loop runs at fixed ISL/OSL and concurrency = batch size):

* meta-llama/Llama-3.1-8B-Instruct / h100_sxm / trtllm / agg
* Qwen/Qwen3-32B / h100_sxm / trtllm / agg   (fp8)
* Qwen/Qwen3-32B / h100_sxm / sglang / agg

Every row is replayed by the simulator three times (no overhead, +1 ms base, +50 µs per
request); simulated TPOT is linear in the two constants to within a few percent, so the
constants minimising the mean squared relative TPOT error follow from a small non-negative
least-squares problem. A last replay with the fitted constants prints the real errors
(TTFT is reported, not fitted: it depends on how the benchmark's clients were started).

Run: ``.venv/bin/python benchmarks/calibrate_overhead.py``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import replace

import numpy as np
from scipy.optimize import nnls

from dynosim.perf.aic import AicStepTime, aic_tables, resolve_key
from dynosim.perf.deployment import resolve
from dynosim.perf.overhead import DEFAULT_OVERHEADS, FrameworkOverhead
from dynosim.validation.silicon import (
    CALIBRATION_GROUPS,
    SiliconRow,
    load_rows,
    replay,
    row_config,
)

PROBES = (FrameworkOverhead(0.0, 0.0), FrameworkOverhead(1000.0, 0.0), FrameworkOverhead(0.0, 50.0))


def replay_with(row: SiliconRow, overhead: FrameworkOverhead) -> tuple[float, float]:
    """Mean (TTFT, TPOT) in ms of the row's benchmark with this overhead."""
    config = row_config(row)
    perf = replace(resolve(config), timing=AicStepTime(aic_tables(resolve_key(config)), overhead))
    r = replay(row, perf=perf)
    return r.ttft_ms, r.tpot_ms


def fit(rows: list[SiliconRow]) -> FrameworkOverhead:
    """Least-squares (relative TPOT error) overhead constants for ``rows``."""
    a, b = [], []
    for row in rows:
        t0, tb, tp = (replay_with(row, p)[1] for p in PROBES)
        a.append([(tb - t0) / 1000.0 / row.tpot_ms, (tp - t0) / 50.0 / row.tpot_ms])
        b.append(1.0 - t0 / row.tpot_ms)
    x, _ = nnls(np.array(a), np.array(b))
    return FrameworkOverhead(round(float(x[0]), 1), round(float(x[1]), 2))


def main() -> None:
    """Fit per backend and print the constants and the replay errors."""
    by_backend: dict[str, list[SiliconRow]] = defaultdict(list)
    for group in CALIBRATION_GROUPS:
        by_backend[group[2]].extend(load_rows(*group))
    for backend, rows in by_backend.items():
        fitted = fit(rows)
        print(f"{backend}: {len(rows)} rows -> {fitted}  (in code: {DEFAULT_OVERHEADS[backend]})")
        for group in CALIBRATION_GROUPS:
            if group[2] != backend:
                continue
            errs = [
                (ttft / r.ttft_ms - 1.0, tpot / r.tpot_ms - 1.0)
                for r in load_rows(*group)
                for ttft, tpot in [replay_with(r, fitted)]
            ]
            tpot = [e[1] for e in errs]
            ttft = [e[0] for e in errs]
            print(
                f"  {group[0]}: TPOT MAPE {statistics.mean(map(abs, tpot)):.1%} "
                f"(bias {statistics.mean(tpot):+.1%}), "
                f"TTFT MAPE {statistics.mean(map(abs, ttft)):.1%} "
                f"(bias {statistics.mean(ttft):+.1%})"
            )


if __name__ == "__main__":
    main()
