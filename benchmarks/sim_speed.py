"""Simulator speed on the Mooncake conversation trace (12,031 requests, 59 min), 8 workers.

Prints simulated requests per wall second and the speed-up over real time for round-robin and
KV-aware routing (fast-forward), plus the step-by-step reference on the first N requests to show
the two modes agree. Run: ``.venv/bin/python benchmarks/sim_speed.py [--repeat 3]``.
Step-time tables are built (or loaded from the disk cache) before timing starts.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from dynosim import DeploymentConfig, Simulation
from dynosim.perf.deployment import resolve
from dynosim.workload import head, load_trace

TRACE = Path(__file__).resolve().parents[2] / "shared/data/traces/mooncake/conversation_trace.jsonl"

BASE = DeploymentConfig.from_dict(
    {
        "model": "meta-llama/Meta-Llama-3.1-8B",
        "gpu": "h200_sxm",
        "backend": "vllm",
        "timing": "aic",
        "tp": 1,
        "workers": 8,
        "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 64},
    }
)


def main() -> None:
    """Run the benchmark and print a table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--repeat", type=int, default=3, help="runs per router; the best is shown")
    ap.add_argument("--reference-requests", type=int, default=2000)
    args = ap.parse_args()

    t0 = time.perf_counter()
    requests = load_trace(args.trace)
    load_s = time.perf_counter() - t0
    perf = resolve(BASE)  # builds/loads the step-time tables once
    print(f"trace: {args.trace.name}, {len(requests):,} requests, loaded in {load_s:.2f} s")
    print(f"KV blocks per worker: {perf.kv_blocks:,}")
    header = f"{'router':<12} {'mode':<14} {'requests':>8} {'wall s':>8} {'req/s':>9} "
    print(header + f"{'speed-up':>9} {'events':>8} {'steps':>9} {'hit rate':>8} {'TTFT p50':>9}")
    for router in ("round_robin", "kv_aware"):
        cfg = replace(BASE, router=router)
        best = None
        for _ in range(args.repeat):
            sim = Simulation(cfg, requests, perf=perf)
            res = sim.run()
            if best is None or res.metrics.wall_s < best.metrics.wall_s:
                best = res
        assert best is not None
        _row(router, "fast-forward", len(requests), best)
        ref = head(requests, args.reference_requests)
        fast = Simulation(cfg, ref, perf=perf).run()
        slow = Simulation(cfg, ref, perf=perf, fast_forward=False).run()
        _row(router, "ff (prefix)", len(ref), fast)
        _row(router, "step-by-step", len(ref), slow)
        print(f"{'':<12} identical per-request records: {fast.records.equal(slow.records)}")


def _row(router: str, mode: str, n: int, res) -> None:  # type: ignore[no-untyped-def]
    m = res.metrics
    print(
        f"{router:<12} {mode:<14} {n:>8,} {m.wall_s:>8.2f} {n / m.wall_s:>9,.0f} "
        f"{m.speedup:>8,.0f}x {res.events:>8,} {res.steps:>9,} {m.prefix_cache_hit_rate:>8.3f} "
        f"{m.time_to_first_token.p50:>9,.0f}"
    )


if __name__ == "__main__":
    main()
