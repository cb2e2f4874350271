"""KV-aware vs round-robin routing on a 1,024-GPU fleet; how many replicas one router should see.

The fleet: 1,024 x Llama-3.1-8B-Instruct on H200 (TP1, vLLM, prefix caching on, the engine
defaults of ``experiments/2026-12-kv-routing``). The traffic: independent copies of the Mooncake
conversation trace played at ``--speed`` (each copy a tenant with its own prompts: its hash ids
offset so that no two tenants share a cached block, and its hour rotated by a seeded random
phase so that their bursts do not line up), cut to the first ``--window`` seconds. The number
of tenants is chosen so that the fleet sees ``--rate-per-worker`` requests per second per GPU
on average; the bursts of the trace come through, since each tenant keeps its own arrivals.

A front load balancer deals the requests round-robin to ``1024 / R`` routers, each routing to
its own ``R`` replicas (a shard); ``R = 1024`` is one router for the whole fleet. Shards do not
interact, so each is simulated on its own and the fleet's figures pool every shard's
per-request records: TTFT and ITL percentiles, the prefix-cache hit rate (cached prompt tokens
over prompt tokens), the completed requests. The first ``--warmup`` seconds of arrivals are left
out of the figures (the caches start cold).

Writes ``results.csv`` (one row per router and shard size) and ``fleet.png`` (hit rate and
TTFT p90 vs replicas per router) next to this file, and prints the table as Markdown::

    .venv/bin/python experiments/2026-12-fleet-scale/run.py                 # the full experiment
    .venv/bin/python experiments/2026-12-fleet-scale/run.py --gpus 64 --window 60
        --shards 8,64 --out /tmp/fleet                                       # a smoke run, ~20 s
"""

from __future__ import annotations

import argparse
import csv
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import cast

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dynosim import DeploymentConfig, Request, Simulation  # noqa: E402
from dynosim.config import RouterName  # noqa: E402
from dynosim.metrics import RequestRecords  # noqa: E402
from dynosim.workload import load_trace  # noqa: E402

TRACE = ROOT.parent / "shared/data/traces/mooncake/conversation_trace.jsonl"
HASH_OFFSET = 1 << 32
"""Added once per tenant to the trace's hash ids: tenants share no cached block."""

BASE = DeploymentConfig.from_dict(
    {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "h200_sxm",
        "backend": "vllm",
        "timing": "aic",
        "tp": 1,
        "workers": 8,
        "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 64},
    }
)
FIELDS = (
    "router",
    "replicas_per_router",
    "routers",
    "gpus",
    "requests",
    "measured",
    "completed",
    "rate_rps",
    "prefix_hit_rate",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_p90_ms",
    "preemptions",
    "cpu_s",
    "cpu_ms_per_request",
    "peak_rss_mib",
)


def fleet_trace(tenants: int, window_s: float, speed: float, seed: int) -> list[Request]:
    """``tenants`` rotated copies of the Mooncake trace at ``speed``, first ``window_s`` seconds."""
    base = load_trace(TRACE)
    duration = max(r.arrival_s for r in base) / speed
    rng = np.random.default_rng(seed)
    rows: list[tuple[float, int, int, int, tuple[int, ...]]] = []
    for t in range(tenants):
        phase = float(rng.uniform(0.0, duration))
        off = t * HASH_OFFSET
        for r in base:
            at = (r.arrival_s / speed + phase) % duration
            if at < window_s:
                hashes = tuple(h + off for h in r.block_hashes)
                rows.append((at, t, r.input_tokens, r.output_tokens, hashes))
    rows.sort(key=lambda row: (row[0], row[1]))
    return [
        Request(id=i, arrival_s=at, input_tokens=n_in, output_tokens=n_out, block_hashes=h)
        for i, (at, _, n_in, n_out, h) in enumerate(rows)
    ]


def shard(requests: Sequence[Request], k: int, n: int) -> list[Request]:
    """The requests the front load balancer deals to router ``k`` of ``n`` (round-robin)."""
    return [replace(r, id=i) for i, r in enumerate(requests[k::n])]


def run_case(
    requests: Sequence[Request], router: str, per_router: int, gpus: int, warmup_s: float
) -> dict[str, float | int | str]:
    """Simulate the fleet as ``gpus / per_router`` independent shards; pooled figures."""
    n = gpus // per_router
    config = replace(BASE, router=cast("RouterName", router), workers=per_router)
    ttft: list[np.ndarray] = []
    itl: list[np.ndarray] = []
    cached = prompt = completed = measured = preempt = 0
    cpu0 = time.process_time()
    for k in range(n):
        reqs = shard(requests, k, n)
        rec: RequestRecords = Simulation(config, reqs).run().records
        keep = rec.arrival_us >= int(warmup_s * 1e6)
        done = keep & rec.completed
        measured += int(keep.sum())
        completed += int(done.sum())
        ttft.append((rec.first_token_us[done] - rec.arrival_us[done]) / 1e3)
        many = done & (rec.output_tokens > 1)
        itl.append(
            (rec.finish_us[many] - rec.first_token_us[many]) / (rec.output_tokens[many] - 1) / 1e3
        )
        cached += int(rec.cached_tokens[keep].sum())
        prompt += int(rec.input_tokens[keep].sum())
        preempt += int(rec.preemptions[keep].sum())
    cpu = time.process_time() - cpu0
    t = np.concatenate(ttft)
    i = np.concatenate(itl)
    span = max(r.arrival_s for r in requests) - warmup_s
    return {
        "router": router,
        "replicas_per_router": per_router,
        "routers": n,
        "gpus": gpus,
        "requests": len(requests),
        "measured": measured,
        "completed": completed,
        "rate_rps": round(measured / span, 1),
        "prefix_hit_rate": round(cached / prompt, 4),
        "ttft_p50_ms": round(float(np.percentile(t, 50)), 1),
        "ttft_p90_ms": round(float(np.percentile(t, 90)), 1),
        "ttft_p99_ms": round(float(np.percentile(t, 99)), 1),
        "itl_p90_ms": round(float(np.percentile(i, 90)), 2),
        "preemptions": preempt,
        "cpu_s": round(cpu, 1),
        "cpu_ms_per_request": round(cpu / len(requests) * 1e3, 4),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def plot(rows: Sequence[dict[str, float | int | str]], out: Path) -> None:
    """Hit rate and TTFT p90 against replicas per router, one line per router."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for router in sorted({str(r["router"]) for r in rows}):
        mine = sorted(
            (r for r in rows if r["router"] == router), key=lambda r: int(r["replicas_per_router"])
        )
        x = [int(r["replicas_per_router"]) for r in mine]
        a.plot(x, [float(r["prefix_hit_rate"]) for r in mine], "o-", label=router)
        b.plot(x, [float(r["ttft_p90_ms"]) for r in mine], "o-", label=router)
    for ax, title in ((a, "prefix-cache hit rate"), (b, "TTFT p90 (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("replicas per router")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    b.set_yscale("log")
    a.legend()
    fig.suptitle(f"{rows[0]['gpus']} x H200, Llama-3.1-8B, Mooncake conversation tenants")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    """Run every (router, shard size) case; write the CSV and the plot."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--rate-per-worker", type=float, default=1.0)
    ap.add_argument("--speed", type=float, default=4.0, help="each tenant's trace speed-up")
    ap.add_argument("--window", type=float, default=300.0, help="seconds of traffic")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds left out of the figures")
    ap.add_argument("--shards", default="8,32,128,1024", help="replicas per router")
    ap.add_argument("--routers", default="kv_aware,round_robin")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    base = load_trace(TRACE)
    rate_1x = len(base) / max(r.arrival_s for r in base)
    tenants = max(1, round(args.rate_per_worker * args.gpus / (rate_1x * args.speed)))
    t0 = time.perf_counter()
    requests = fleet_trace(tenants, args.window, args.speed, args.seed)
    print(
        f"{tenants} tenants, {len(requests):,} requests in {args.window:g} s "
        f"({len(requests) / args.window:.0f} req/s), built in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    rows = []
    for router in args.routers.split(","):
        for per in (int(s) for s in args.shards.split(",")):
            if args.gpus % per:
                continue
            row = run_case(requests, router, per, args.gpus, args.warmup)
            print(row, flush=True)
            rows.append(row)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    plot(rows, args.out / "fleet.png")
    print("| " + " | ".join(FIELDS) + " |")
    print("|" + "---|" * len(FIELDS))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in FIELDS) + " |")


if __name__ == "__main__":
    main()
