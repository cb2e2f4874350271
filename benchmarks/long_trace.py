"""Long traces: one million synthetic requests on 512 workers, time and memory.

The workload of issue 21's fleet-scale rows: Poisson arrivals at 0.9 req/s per worker,
lognormal prompt lengths (mean 2,048 tokens, sigma 0.6) behind one of 64 shared 1,024-token
prefixes, lognormal outputs (mean 256, sigma 0.6), on ``benchmarks/sim_speed.py``'s ``BASE``
deployment (Llama-3.1-8B, H200, vLLM, TP1) scaled to ``--workers`` workers. For each router it
prints the phases' CPU and wall time (generating the trace, building the simulation, running it,
summarising), the peak RSS of the process (``resource.getrusage``: the high-water mark, so a
later router only shows if it needs more than an earlier one; run one router a process for
clean figures) and a few metrics to show the run is sane.

With ``--tracemalloc`` it also prints the largest allocation sites at the run's end (slower).
The targets (issue 21): under 10 minutes on one core and under 4 GiB peak for 1M requests.

``--trace FILE`` simulates a trace file instead (its parse timed as ``load_trace``).

Run: ``.venv/bin/python benchmarks/long_trace.py [--requests 1000000] [--workers 512]
[--router round_robin,least_loaded,kv_aware] [--tracemalloc] [--trace FILE]``.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_speed import BASE

from dynosim import DeploymentConfig, Simulation
from dynosim.workload import (
    ArrivalSpec,
    LengthSpec,
    PrefixSpec,
    WorkloadSpec,
    generate,
    load_trace,
)

T = TypeVar("T")
PER_WORKER_RPS = 0.9


def _rss_mib() -> float:
    """The process's peak resident set so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(label: str, fn: Callable[[], T]) -> T:
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"  {label:<10} cpu {cpu:8.1f} s  wall {wall:8.1f} s  peak RSS {_rss_mib():8,.0f} MiB")
    return out


def spec(requests: int, workers: int, seed: int) -> WorkloadSpec:
    """The synthetic workload: ``requests`` Poisson arrivals at 0.9 req/s a worker."""
    return WorkloadSpec(
        requests=requests,
        arrival=ArrivalSpec(process="poisson", rate_rps=PER_WORKER_RPS * workers),
        input_tokens=LengthSpec(dist="lognormal", mean=2048, sigma=0.6),
        output_tokens=LengthSpec(dist="lognormal", mean=256, sigma=0.6),
        prefix=PrefixSpec(groups=64, tokens=1024),
        seed=seed,
        name=f"poisson-{requests}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=512)
    parser.add_argument("--router", default="round_robin,least_loaded")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--trace", type=Path, help="simulate this trace file instead (timed)")
    args = parser.parse_args()
    if args.tracemalloc:
        tracemalloc.start(4)
    if args.trace is not None:
        print(f"{args.trace}, {args.workers} workers, start peak RSS {_rss_mib():,.0f} MiB")
        requests = _timed("load_trace", lambda: load_trace(args.trace))
    else:
        print(
            f"{args.requests:,} requests, {args.workers} workers "
            f"({PER_WORKER_RPS * args.workers:,.1f} req/s), start peak RSS {_rss_mib():,.0f} MiB"
        )
        workload = spec(args.requests, args.workers, args.seed)
        requests = _timed("generate", lambda: generate(workload))
    for router in args.router.split(","):
        print(f"router {router}:")
        config = DeploymentConfig.from_dict(
            {**BASE.to_dict(), "workers": args.workers, "router": router}
        )
        cpu0, wall0 = time.process_time(), time.perf_counter()
        sim = _timed("build", lambda c=config: Simulation(c, requests, seed=args.seed))
        result = _timed("run", sim.run)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        m = result.metrics
        print(
            f"  total      cpu {cpu:8.1f} s  wall {wall:8.1f} s  "
            f"{cpu / len(requests) * 1e3:.3f} ms CPU a request, {m.speedup:,.0f}x real time, "
            f"{result.events:,} events, {result.steps:,} steps"
        )
        print(
            f"  metrics    completed {m.completed_requests:,}  "
            f"TTFT p50 {m.time_to_first_token.p50:.1f} ms  ITL p50 {m.inter_token_latency.p50:.2f} "
            f"ms  hit rate {m.prefix_cache_hit_rate:.3f}"
        )
        if args.tracemalloc:
            snapshot = tracemalloc.take_snapshot()
            print("  largest allocation sites (tracemalloc):")
            for stat in snapshot.statistics("lineno")[:12]:
                frame = stat.traceback[0]
                where = f"{Path(frame.filename).name}:{frame.lineno}"
                print(f"    {stat.size / 2**20:9,.1f} MiB {stat.count:>10,}  {where}")
        del sim, result
        gc.collect()


if __name__ == "__main__":
    main()
