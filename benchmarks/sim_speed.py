"""Simulator speed: the Mooncake conversation trace, a high-rate synthetic case, a whole process.

Five figures, all on 8 workers of the same deployment (``BASE``) or its disaggregated twin:

* Mooncake conversation trace (12,031 requests, 59 min): simulated requests per wall second and
  the speed-up over real time for round-robin and KV-aware routing (fast-forward, best of
  ``--repeat``), plus the step-by-step reference on the first N requests to show the two modes
  agree;
* high arrival rate: 10,000 Poisson requests at 20 req/s with lognormal lengths (input mean
  1024, output mean 256, sigma 0.6), fast-forward, best of ``--repeat``;
* disaggregated: the Mooncake trace on 4 prefill + 4 decode workers (KV-aware and round-robin
  prefill routing, least-loaded decode routing, NVLink transfers), fast-forward, best of
  ``--repeat``, plus the step-by-step reference on the first N requests;
* planner: the Mooncake trace on an aggregated pool of 1-8 workers scaled by the load planner
  (10 s interval, 60 s cold start), fast-forward, plus the step-by-step reference;
* schedulers: the Mooncake trace on ``BASE`` (KV-aware routing) scheduled as vLLM v1, SGLang
  (prefill and decode batches alternating, and with ``enable_mixed_chunk``) and TRT-LLM
  (``GUARANTEED_NO_EVICT`` and ``MAX_UTILIZATION``), all with vLLM's step times so that only
  the policy differs, fast-forward, plus the step-by-step reference on the first N requests;
* workers: CPU time per simulated request against the cluster size (8 / 64 / 512 / 2,048
  workers of ``BASE``) at the same load per worker: Poisson at 0.9 req/s per worker, prompts
  of one of 64 shared 1,024-token prefixes plus lognormal(1,024, sigma 0.6) more tokens,
  lognormal(256, 0.6) output tokens, ``--per-worker`` requests per worker (at least
  ``--min-requests``, at most ``--max-requests``; 250 by default, so that every size runs the
  same simulated time per worker and reaches the same prefix-cache hit rate: with 20 a
  512-worker cluster stayed cold, 0.07 against 0.37 at 8 workers), every router, the least CPU
  of up to ``--repeat`` runs while they take under 2 s in all (so the short runs repeat)
  (``time.process_time`` of ``Simulation.run``: workload generation and set-up not counted);
  ``workers-disagg`` the same traffic on half prefill and half decode workers, for pairs of
  prefill/decode routers (``--disagg-routers``);
* attention DP (``adp``): ``BASE``'s 8 workers as 2 replicas of 4 attention-DP ranks whose
  steps end together (:mod:`dynosim.engine.lockstep`), least-loaded routing, scheduled as vLLM
  (whose ranks of this dense model are independent engines), SGLang, TRT-LLM and TRT-LLM with
  its attention-DP balancing, fast-forward and the step-by-step reference on the first N
  requests;
* whole process: ``dynosim simulate examples/llama8b_h200_vllm.yaml --trace <Mooncake>`` as a
  subprocess (pinned to one core with ``taskset -c 0`` when available), simulated seconds per
  process wall second, so start-up (imports, step-time tables, trace parsing) counts, and per
  process CPU second (steadier on a shared machine); ``process-disagg``: the same with
  ``examples/llama8b_h200_vllm_disagg.yaml`` (4 prefill + 4 decode). One untimed run first
  fills the disk caches. With ``PYTHONDONTWRITEBYTECODE`` set, every process
  compiles dynosim's modules from source; ``--bytecode-cache`` unsets it for the subprocess, as
  in an ordinary installation.

Run: ``.venv/bin/python benchmarks/sim_speed.py [--repeat 5]
[--only mooncake,rate,disagg,planner,schedulers,adp,process,process-disagg,workers]``
(``workers`` and ``workers-disagg`` are not in the default set; ``--workers 8,64`` picks
the sizes).
Step-time tables are built (or loaded from the disk cache) before timing starts.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dynosim import DeploymentConfig, Request, Simulation
from dynosim.config import Backend
from dynosim.perf.deployment import DeploymentPerf, resolve
from dynosim.simulation import SimResult
from dynosim.workload import (
    ArrivalSpec,
    LengthSpec,
    PrefixSpec,
    WorkloadSpec,
    generate,
    head,
    load_trace,
)

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared/data/traces/mooncake/conversation_trace.jsonl"
EXAMPLE = ROOT / "examples/llama8b_h200_vllm.yaml"
EXAMPLE_DISAGG = ROOT / "examples/llama8b_h200_vllm_disagg.yaml"  # its 4 + 4 twin

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

HIGH_RATE = WorkloadSpec(
    requests=10_000,
    arrival=ArrivalSpec(process="poisson", rate_rps=20.0),
    input_tokens=LengthSpec(dist="lognormal", mean=1024, sigma=0.6),
    output_tokens=LengthSpec(dist="lognormal", mean=256, sigma=0.6),
    seed=0,
    name="poisson-20rps",
)

SWEEP_ROUTERS = ("round_robin", "least_loaded", "kv_aware", "kv_load")


def sweep_workload(workers: int, requests: int) -> WorkloadSpec:
    """The ``workers`` case's traffic: 0.9 req/s per worker, 64 shared 1,024-token prefixes."""
    return WorkloadSpec(
        requests=requests,
        arrival=ArrivalSpec(process="poisson", rate_rps=0.9 * workers),
        input_tokens=LengthSpec(dist="lognormal", mean=1024, sigma=0.6),
        output_tokens=LengthSpec(dist="lognormal", mean=256, sigma=0.6),
        prefix=PrefixSpec(groups=64, tokens=1024),
        seed=0,
        name=f"fleet-{workers}",
    )


HEADER = (
    f"{'router':<12} {'mode':<14} {'requests':>8} {'wall s':>8} {'req/s':>9} "
    f"{'speed-up':>9} {'events':>8} {'steps':>9} {'hit rate':>8} {'TTFT p50':>9}"
)


def main() -> None:
    """Run the benchmarks and print tables."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the best is shown")
    ap.add_argument("--reference-requests", type=int, default=2000)
    ap.add_argument(
        "--only",
        default="mooncake,rate,disagg,planner,schedulers,adp,process,process-disagg",
        help="comma-separated cases",
    )
    ap.add_argument(
        "--bytecode-cache", action="store_true", help="let the subprocess write __pycache__"
    )
    ap.add_argument("--workers", default="8,64,512,2048", help="cluster sizes of 'workers'")
    ap.add_argument("--per-worker", type=int, default=250, help="requests per worker")
    ap.add_argument("--min-requests", type=int, default=2000, help="floor per run")
    ap.add_argument("--max-requests", type=int, default=1_000_000, help="cap per run")
    ap.add_argument("--routers", default=",".join(SWEEP_ROUTERS), help="routers of 'workers'")
    ap.add_argument(
        "--disagg-routers",
        default="round_robin/least_loaded,kv_aware/least_loaded,kv_aware/kv_load",
        help="prefill/decode routers of 'workers-disagg'",
    )
    args = ap.parse_args()
    cases = set(args.only.split(","))
    perf = resolve(BASE)  # builds/loads the step-time tables once
    print(f"KV blocks per worker: {perf.kv_blocks:,}")
    if "mooncake" in cases:
        mooncake(args.trace, perf, args.repeat, args.reference_requests)
    if "rate" in cases:
        high_rate(perf, args.repeat)
    if "disagg" in cases:
        disagg(args.trace, perf, args.repeat, args.reference_requests)
    if "planner" in cases:
        planner(args.trace, perf, args.repeat, args.reference_requests)
    if "schedulers" in cases:
        schedulers(args.trace, perf, args.repeat, args.reference_requests)
    if "adp" in cases:
        attention_dp(args.trace, perf, args.repeat, args.reference_requests)
    if "process" in cases:
        whole_process(args.trace, args.repeat, EXAMPLE, bytecode_cache=args.bytecode_cache)
    if "process-disagg" in cases:
        whole_process(args.trace, args.repeat, EXAMPLE_DISAGG, bytecode_cache=args.bytecode_cache)
    if "workers" in cases:
        sizes = [int(x) for x in args.workers.split(",")]
        bounds = (args.min_requests, args.max_requests)
        worker_sweep(
            perf, sizes, args.per_worker, bounds, args.routers.split(","), repeat=args.repeat
        )
    if "workers-disagg" in cases:
        sizes = [int(x) for x in args.workers.split(",")]
        bounds = (args.min_requests, args.max_requests)
        pairs = args.disagg_routers.split(",")
        worker_sweep(perf, sizes, args.per_worker, bounds, pairs, disagg=True, repeat=args.repeat)


def mooncake(trace: Path, perf: DeploymentPerf, repeat: int, reference: int) -> None:
    """Both routers on the trace, and the step-by-step reference on its first requests."""
    t0 = time.perf_counter()
    requests = load_trace(trace)
    print(
        f"\ntrace: {trace.name}, {len(requests):,} requests, loaded in "
        f"{time.perf_counter() - t0:.2f} s"
    )
    print(HEADER)
    for router in ("round_robin", "kv_aware"):
        cfg = replace(BASE, router=router)
        _row(router, "fast-forward", len(requests), _best(cfg, requests, perf, repeat))
        ref = head(requests, reference)
        fast = Simulation(cfg, ref, perf=perf).run()
        slow = Simulation(cfg, ref, perf=perf, fast_forward=False).run()
        _row(router, "ff (prefix)", len(ref), fast)
        _row(router, "step-by-step", len(ref), slow)
        print(f"{'':<12} identical per-request records: {fast.records.equal(slow.records)}")


def high_rate(perf: DeploymentPerf, repeat: int) -> None:
    """The synthetic high-arrival-rate case, fast-forward, both routers."""
    requests = generate(HIGH_RATE)
    print(
        f"\n{HIGH_RATE.name}: {len(requests):,} Poisson requests at "
        f"{HIGH_RATE.arrival.rate_rps:g} req/s, lognormal lengths"
    )
    print(HEADER)
    for router in ("round_robin", "kv_aware"):
        cfg = replace(BASE, router=router)
        _row(router, "fast-forward", len(requests), _best(cfg, requests, perf, repeat))


def disagg(trace: Path, perf: DeploymentPerf, repeat: int, reference: int) -> None:
    """4 prefill + 4 decode workers on the trace, and the step-by-step reference."""
    requests = load_trace(trace)
    print(f"\ndisaggregated, 4 prefill + 4 decode workers: {trace.name}")
    print(HEADER)
    pools = {"prefill": perf, "decode": perf}
    for router in ("round_robin", "kv_aware"):
        cfg = DeploymentConfig.from_dict(
            {
                **{k: v for k, v in BASE.to_dict().items() if k not in ("tp", "workers")},
                "mode": "disagg",
                "prefill": {"workers": 4},
                "decode": {"workers": 4},
                "router": router,
                "decode_router": "least_loaded",
            }
        )
        _row(router, "fast-forward", len(requests), _best(cfg, requests, pools, repeat))
        _reference(cfg, head(requests, reference), pools)


def planner(trace: Path, perf: DeploymentPerf, repeat: int, reference: int) -> None:
    """The load planner scaling 1-8 aggregated workers on the trace."""
    requests = load_trace(trace)
    print(f"\nload planner, 1-8 aggregated workers: {trace.name}")
    print(HEADER)
    plan = {"policy": "load", "adjustment_interval_s": 10, "startup_s": 60, "max_workers": 8}
    for router in ("round_robin", "kv_aware"):
        cfg = DeploymentConfig.from_dict(
            {**BASE.to_dict(), "workers": 2, "router": router, "planner": plan}
        )
        best = _best(cfg, requests, perf, repeat)
        _row(router, "fast-forward", len(requests), best)
        print(
            f"{'':<12} {best.metrics.scaling_events} scaling events, "
            f"{best.metrics.gpus:.2f} GPUs on average"
        )
        _reference(cfg, head(requests, reference), perf)


SCHEDULERS: dict[str, tuple[Backend, dict[str, Any]]] = {
    "vllm": ("vllm", {}),
    "sglang": ("sglang", {}),
    "sglang-mixed": ("sglang", {"enable_mixed_chunk": True}),
    "trtllm-gne": ("trtllm", {"capacity_scheduler_policy": "GUARANTEED_NO_EVICT"}),
    "trtllm-maxutil": ("trtllm", {"capacity_scheduler_policy": "MAX_UTILIZATION"}),
}


def schedulers(trace: Path, perf: DeploymentPerf, repeat: int, reference: int) -> None:
    """Each backend's scheduling policy on the trace (the same step times for all)."""
    requests = load_trace(trace)
    print(f"\nscheduling policies, 8 workers, KV-aware routing: {trace.name}")
    print(HEADER.replace("router      ", "policy      "))
    for name, (backend, extra) in SCHEDULERS.items():
        cfg = replace(
            BASE, router="kv_aware", backend=backend, engine=replace(BASE.engine, **extra)
        )
        _policy_rows(name, cfg, requests, perf, repeat, reference)


ADP = {
    "vllm": ("vllm", {}),
    "sglang": ("sglang", {}),
    "trtllm": ("trtllm", {}),
    "trtllm-balance": (
        "trtllm",
        {
            "attention_dp_enable_balance": True,
            "attention_dp_timeout_iters": 60,
            "attention_dp_batching_wait_iters": 0,
        },
    ),
}


def attention_dp(trace: Path, perf: DeploymentPerf, repeat: int, reference: int) -> None:
    """``BASE``'s 8 workers as 2 replicas of 4 attention-DP ranks that step together."""
    requests = load_trace(trace)
    print(f"\nattention DP, 2 replicas x 4 ranks, least-loaded routing: {trace.name}")
    print(HEADER.replace("router      ", "backend     "))
    for name, (backend, extra) in ADP.items():
        data = BASE.to_dict() | {"workers": 2, "attention_dp": 4, "router": "least_loaded"}
        cfg = DeploymentConfig.from_dict(
            data | {"backend": backend, "engine": {**data["engine"], **extra}}
        )
        _policy_rows(name, cfg, requests, perf, repeat, reference)


def _policy_rows(
    name: str,
    cfg: DeploymentConfig,
    requests: Sequence[Request],
    perf: DeploymentPerf,
    repeat: int,
    reference: int,
) -> None:
    """The fast-forward row (best of ``repeat``) and the step-by-step reference's."""
    _row(name, "fast-forward", len(requests), _best(cfg, requests, perf, repeat))
    ref = head(requests, reference)
    fast = Simulation(cfg, ref, perf=perf).run()
    slow = Simulation(cfg, ref, perf=perf, fast_forward=False).run()
    _row(name, "step-by-step", len(ref), slow)
    print(f"{'':<12} identical per-request records: {fast.records.equal(slow.records)}")


_SWEEP_CPU_S = 2.0
"""A cluster size's runs are repeated (up to ``--repeat``, the least CPU kept) until they have
taken this much CPU: a run of a few tenths of a second is at the mercy of the machine."""


def worker_sweep(
    perf: DeploymentPerf,
    sizes: Sequence[int],
    per_worker: int,
    bounds: tuple[int, int],
    routers: Sequence[str],
    *,
    disagg: bool = False,
    repeat: int = 1,
) -> None:
    """CPU time per simulated request of each router as the cluster grows (same load per worker).

    ``disagg``: half the workers prefill, half decode; each router is ``prefill/decode``.
    ``repeat``: at most this many runs of a size (the least CPU kept) while they have taken
    less than :data:`_SWEEP_CPU_S` in all.
    """
    title = "workers-disagg (half prefill, half decode)" if disagg else "workers"
    print(
        f"\n{title}: Poisson 0.9 req/s per worker, 64 shared 1k prefixes + lognormal 1k in / "
        f"256 out, {per_worker} requests per worker (at least {bounds[0]:,}, at most "
        f"{bounds[1]:,}); CPU time of run()"
    )
    print(
        f"{'router':<26} {'workers':>7} {'requests':>8} {'CPU s':>8} {'ms/req':>8} "
        f"{'x 8w':>6} {'hit rate':>8} {'TTFT p50':>9}"
    )
    for router in routers:
        first: float | None = None
        for n in sizes:
            count = min(bounds[1], max(bounds[0], per_worker * n))
            requests = generate(sweep_workload(n, count))
            cfg = _sweep_config(n, router, disagg=disagg)
            cpu, spent, runs = float("inf"), 0.0, 0
            while runs < repeat and (runs == 0 or spent < _SWEEP_CPU_S):
                sim = Simulation(cfg, requests, perf={name: perf for name, _ in cfg.pools()})
                gc.collect()  # the previous run's garbage is not this run's cost
                t0 = time.process_time()
                res = sim.run()
                took = time.process_time() - t0
                cpu, spent, runs = min(cpu, took), spent + took, runs + 1
            per = cpu / len(requests) * 1e3
            first = per if first is None else first
            m = res.metrics
            print(
                f"{router:<26} {n:>7,} {len(requests):>8,} {cpu:>8.2f} {per:>8.3f} "
                f"{per / first:>6.2f} {m.prefix_cache_hit_rate:>8.3f} "
                f"{m.time_to_first_token.p50:>9,.0f}",
                flush=True,
            )


def _sweep_config(n: int, router: str, *, disagg: bool) -> DeploymentConfig:
    """``BASE`` on ``n`` workers: aggregated, or half prefill and half decode."""
    if not disagg:
        return DeploymentConfig.from_dict({**BASE.to_dict(), "workers": n, "router": router})
    entry, decode = router.split("/")
    return DeploymentConfig.from_dict(
        {
            **{k: v for k, v in BASE.to_dict().items() if k not in ("tp", "workers")},
            "mode": "disagg",
            "prefill": {"workers": n // 2},
            "decode": {"workers": n - n // 2},
            "router": entry,
            "decode_router": decode,
        }
    )


def _reference(
    cfg: DeploymentConfig,
    requests: Sequence[Request],
    perf: DeploymentPerf | dict[str, DeploymentPerf],
) -> None:
    fast = Simulation(cfg, requests, perf=perf).run()
    slow = Simulation(cfg, requests, perf=perf, fast_forward=False).run()
    _row(cfg.router, "ff (prefix)", len(requests), fast)
    _row(cfg.router, "step-by-step", len(requests), slow)
    print(f"{'':<12} identical per-request records: {fast.records.equal(slow.records)}")


def whole_process(trace: Path, repeat: int, example: Path, *, bytecode_cache: bool = False) -> None:
    """``dynosim simulate`` as a subprocess on one core: simulated s per process wall s."""
    exe = Path(sys.executable).with_name("dynosim")
    cmd = [str(exe), "simulate", str(example), "--trace", str(trace)]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    env = dict(os.environ)
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    best_wall, best_cpu, sim_s, inner = float("inf"), float("inf"), 0.0, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "metrics.json"
        subprocess.run([*cmd, "--json", str(out)], check=True, capture_output=True, env=env)
        for _ in range(repeat):
            t0, c0 = time.perf_counter(), _children_cpu()
            subprocess.run([*cmd, "--json", str(out)], check=True, capture_output=True, env=env)
            wall = time.perf_counter() - t0
            best_cpu = min(best_cpu, _children_cpu() - c0)
            if wall < best_wall:
                metrics = json.loads(out.read_text())["metrics"]
                best_wall = wall
                sim_s = metrics["simulated_duration_s"]
                inner = metrics["speedup"]
    pyc = "off" if env.get("PYTHONDONTWRITEBYTECODE") else "on"
    print(
        f"\nwhole process ({'taskset -c 0 ' if cmd[0] == 'taskset' else ''}dynosim simulate "
        f"{example.name} --trace {trace.name}), best of {repeat}, bytecode cache {pyc}:"
    )
    print(
        f"  process wall {best_wall:.2f} s, simulated {sim_s:,.0f} s: "
        f"{sim_s / best_wall:,.0f}x real time (inside the process: {inner:,.0f}x); "
        f"process CPU {best_cpu:.2f} s: {sim_s / best_cpu:,.0f}x"
    )


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes so far."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _best(
    cfg: DeploymentConfig,
    requests: Sequence[Request],
    perf: DeploymentPerf | dict[str, DeploymentPerf],
    repeat: int,
) -> SimResult:
    best: SimResult | None = None
    for _ in range(repeat):
        res = Simulation(cfg, requests, perf=perf).run()
        if best is None or res.metrics.wall_s < best.metrics.wall_s:
            best = res
    assert best is not None
    return best


def _row(router: str, mode: str, n: int, res: SimResult) -> None:
    m = res.metrics
    print(
        f"{router:<12} {mode:<14} {n:>8,} {m.wall_s:>8.2f} {n / m.wall_s:>9,.0f} "
        f"{m.speedup:>8,.0f}x {res.events:>8,} {res.steps:>9,} {m.prefix_cache_hit_rate:>8.3f} "
        f"{m.time_to_first_token.p50:>9,.0f}"
    )


if __name__ == "__main__":
    main()
