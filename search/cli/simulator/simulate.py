"""``dynosim simulate DEPLOYMENT.yaml (--trace FILE | --workload W.yaml)``: one simulation."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dynosim.checks import MAX_SEED, integer
from dynosim.config import DeploymentConfig
from dynosim.config.cluster import INTERVAL_WHY, MIN_INTERVAL_S
from dynosim.errors import DynosimError
from dynosim.files import load_deployment
from dynosim.metrics import LATENCY_METRICS, Metrics
from dynosim.simulation import Simulation
from dynosim.types import Request
from dynosim.workload import Workload, head, load_trace_workload, speedup
from dynosim.workload.limits import MAX_SAMPLES
from search.cli.shared import (
    make_console,
    refuse_trace_as_workload,
    slo_unit_warnings,
    spinner,
    writing,
)


def add_parser(p: argparse.ArgumentParser) -> None:
    """Arguments of ``dynosim simulate``."""
    p.add_argument("deployment", type=Path, help="deployment YAML file")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", type=Path, help="trace file (Mooncake JSONL, Azure or generic CSV)")
    src.add_argument("--workload", type=Path, help="synthetic workload YAML file")
    p.add_argument("--json", type=Path, help="write the metrics as JSON here")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--trace-speedup", type=float, default=1.0, help="replay X times faster")
    p.add_argument("--max-requests", type=int, help="keep only the first N requests")
    p.add_argument(
        "--timeline",
        type=Path,
        help="write an HTML plot of workers, queues, TTFT and KV usage over time here",
    )
    p.add_argument(
        "--timeline-interval",
        type=float,
        default=1.0,
        help="seconds between timeline samples (default 1; a planner samples at its own pace)",
    )
    p.add_argument(
        "--error-bands",
        action="store_true",
        help="also print each latency metric with the calibration profile's +-1 sigma band",
    )
    p.add_argument(
        "--step-by-step",
        action="store_true",
        help="reference mode: one event per engine step (slow; same results)",
    )


def load_workload(args: argparse.Namespace) -> Workload:
    """The workload the arguments name, with transforms applied."""
    if args.max_requests is not None and args.max_requests < 1:
        raise DynosimError(f"--max-requests: got {args.max_requests}; allowed: an integer >= 1")
    if args.trace is not None:
        return load_trace_workload(
            args.trace, speedup=args.trace_speedup, max_requests=args.max_requests
        )
    from dynosim.workload.files import load_workload_file  # a trace does not need it

    wl = load_workload_file(args.workload)
    reqs = list(wl.requests)
    if args.max_requests is not None:
        reqs = head(reqs, args.max_requests)
    if args.trace_speedup != 1.0:
        reqs = speedup(reqs, args.trace_speedup)
    return Workload(requests=tuple(reqs), warmup_requests=wl.warmup_requests, name=wl.name)


def check_samples(
    config: DeploymentConfig, requests: Sequence[Request], timeline_s: float | None
) -> None:
    """Refuse a run whose periodic samples (timeline, planner) would exceed :data:`MAX_SAMPLES`.

    The projection is the arrivals' span over the shortest sampling period: a lower bound of
    the samples the run takes (it lasts at least until the last arrival).
    """
    periods = [] if timeline_s is None else [("--timeline-interval", timeline_s)]
    if config.planner is not None:
        p = config.planner
        periods.append(("planner.metric_pulling_interval_s", p.metric_pulling_interval_s))
        periods.append(("planner.adjustment_interval_s", p.adjustment_interval_s))
    span = max((r.arrival_s for r in requests), default=0.0)
    for name, period in periods:
        samples = span / period
        if samples > MAX_SAMPLES:
            raise DynosimError(
                f"{name}: got {period:g} s over {span:,.0f} s of arrivals = {samples:,.0f} "
                f"samples; allowed: at most {MAX_SAMPLES:,} samples a run (a longer period)"
            )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the workload is read and simulated, then frozen.

    Freezing keeps everything made so far (modules, config, requests, the simulation) out of
    the collector's sight for the process's life. A simulation makes no cyclic garbage, but its
    objects are young and a trace's requests are made in one go: on the Mooncake trace (8
    workers, KV-aware) the collector ran one young collection over the fresh requests (5-6 ms)
    and 38 during the run (about 19 ms), finding nothing, and the exit's full collection walked
    and freed the 24k objects of the simulation's reference cycles (workers, pools, timers:
    25-30 ms); on 4 + 4 disaggregated workers 34 and 55 ms. Frozen objects are not freed at
    exit (an in-process caller, a test, keeps them until it exits).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def run(args: argparse.Namespace) -> int:
    """Simulate and print a table; write JSON if asked."""
    from dynosim.perf.overhead import with_calibration

    integer("--seed", args.seed, 0, MAX_SEED)
    console = make_console()
    if args.workload is not None:
        refuse_trace_as_workload(args.workload)
    config = with_calibration(load_deployment(args.deployment), args.deployment.parent)
    slo = {f"slo.{k}": v for k, v in dataclasses.asdict(config.slo).items() if v is not None}
    for line in slo_unit_warnings(slo):
        warnings.warn(line, UserWarning, stacklevel=1)
    interval = args.timeline_interval
    if not (math.isfinite(interval) and MIN_INTERVAL_S <= interval <= 10_000_000):
        raise DynosimError(f"--timeline-interval: got {interval}; allowed: {INTERVAL_WHY}")
    with collector_paused():
        workload = load_workload(args)
        check_samples(config, workload.requests, interval if args.timeline is not None else None)
        with spinner(console, f"simulating {len(workload.requests):,} requests..."):
            sim = Simulation(
                config,
                workload.requests,
                seed=args.seed,
                fast_forward=not args.step_by_step,
                sample_interval_s=interval if args.timeline is not None else None,
            )
            result = sim.run(warmup_requests=workload.warmup_requests)
    title = f"{args.deployment.name} on {workload.name}"
    console.print(metrics_table(result.metrics, title=title))
    bands = error_bands(result.metrics, config) if getattr(args, "error_bands", False) else {}
    if bands:
        console.print(bands_table(bands))
    elif getattr(args, "error_bands", False):
        console.print(f"[yellow]no error bands: the calibration profile has no spread for "
                      f"backend {config.backend}[/yellow]")  # fmt: skip
    client = _client(args)
    reported: dict[str, float] = {}
    if client is not None:
        from dynosim.validation.client_metrics import client_metrics

        reported = client_metrics(result.records, client.name, workload.warmup_requests)
        console.print(client_table(reported, client.name))
    if len(result.metrics.pools) > 1 or config.planner is not None:
        console.print(pools_table(result.metrics))
    if result.rejections:
        first = next(iter(result.rejections.items()))
        console.print(
            f"[yellow]{len(result.rejections)} rejected; e.g. request {first[0]}: "
            f"{first[1]}[/yellow]"
        )
    if args.json is not None:
        payload = {
            "deployment": config.to_dict(),
            "workload": workload.name,
            "seed": args.seed,
            "metrics": _jsonable(result.metrics.to_dict()),
        }
        if client is not None:
            payload["client"] = {"name": client.name, "metrics": _jsonable(reported)}
        if bands:
            payload["error_bands"] = _jsonable(bands)
        with writing("--json", args.json):
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(payload, indent=2) + "\n")
        console.print(f"metrics written to {args.json}")
    if args.timeline is not None:
        from search.results.pages.timeline import write_timeline

        with writing("--timeline", args.timeline):
            write_timeline(result, args.timeline, title=title, slo=config.slo)
        console.print(f"timeline written to {args.timeline}")
    return 0


def _client(args: argparse.Namespace) -> Any:
    """The benchmark client a ``--workload`` file names, if it names one."""
    if args.workload is None:
        return None
    from dynosim.workload import ClientWorkload, parse_workload_file

    parsed = parse_workload_file(args.workload)
    return parsed.client if isinstance(parsed, ClientWorkload) else None


def client_table(reported: dict[str, float], name: str) -> Any:
    """The run's figures as the benchmark client would print them."""
    from rich.table import Table

    t = Table(title=f"as {name} reports it", title_justify="left")
    t.add_column("metric", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    for k, v in reported.items():
        t.add_row(k, f"{v:,.2f}")
    return t


def pools_table(m: Metrics) -> Any:
    """Per-pool figures: workers, GPUs, utilisation, queueing, KV usage, scaling."""
    from rich.table import Table

    t = Table(title="pools", title_justify="left")
    for col in ("pool", "tp", "workers (avg)", "peak", "GPUs (avg)", "utilization",
                "queue avg ms", "queue p90 ms", "KV usage", "scaling events"):  # fmt: skip
        t.add_column(col, justify="left" if col == "pool" else "right", no_wrap=True)
    for p in m.pools:
        t.add_row(
            p.name, str(p.tp), f"{p.workers:.2f}", str(p.peak_workers), f"{p.gpus:.2f}",
            f"{p.utilization:.1%}", f"{p.queue_time.avg:,.1f}", f"{p.queue_time.p90:,.1f}",
            "-" if math.isnan(p.kv_usage) else f"{p.kv_usage:.1%}", str(p.scaling_events),
        )  # fmt: skip
    if m.kv_transfer_time.avg == m.kv_transfer_time.avg:  # not NaN: there were transfers
        s = m.kv_transfer_time
        t.caption = (
            f"KV transfer (ms, in TTFT): avg {s.avg:,.2f}, p90 {s.p90:,.2f}, max {s.max:,.2f}"
        )
    return t


def metrics_table(m: Metrics, *, title: str) -> Any:
    """A rich table of the metrics serving engineers read first."""
    from rich.table import Table

    stats = ("avg", "p50", "p90", "p99", "min", "max")
    t = Table(title=title, title_justify="left")
    t.add_column("metric", no_wrap=True)
    t.add_column("unit", no_wrap=True)
    for k in stats:
        t.add_column(k, justify="right", no_wrap=True)
    for name in (*LATENCY_METRICS, "output_token_throughput_per_user"):
        s = getattr(m, name)
        unit = "tok/s" if name.startswith("output") else "ms"
        t.add_row(name, unit, *(f"{getattr(s, k):,.1f}" for k in stats))
    scalars = [
        ("request_throughput", "req/s", m.request_throughput),
        ("output_token_throughput", "tok/s", m.output_token_throughput),
        ("output_token_throughput_per_gpu", "tok/s", m.output_token_throughput_per_gpu),
        ("goodput", "req/s", m.goodput),
        ("prefix_cache_hit_rate", "", m.prefix_cache_hit_rate),
        ("gpus", "", m.gpus),
        ("gpu_hours", "h", m.gpu_hours),
        ("cost_per_million_output_tokens", "$", m.cost_per_million_output_tokens),
        ("completed_requests", "", m.completed_requests),
        ("rejected_requests", "", m.rejected_requests),
        ("preemptions", "", m.preemptions),
        ("scaling_events", "", m.scaling_events),
        ("simulated_duration_s", "s", m.simulated_duration_s),
        ("wall_s", "s", m.wall_s),
        ("speed-up over real time", "x", m.speedup),
    ]
    for label, unit, v in scalars:
        t.add_row(label, unit, f"{v:,.3f}" if isinstance(v, float) else f"{v:,}")
    return t


def error_bands(m: Metrics, config: Any) -> dict[str, dict[str, float]]:
    """Each latency statistic with the profile's +-1 sigma band (log-normal error).

    TTFT takes the backend's ``ttft`` spread, ITL (and 1/ITL) its ``tpot`` spread; request
    latency is not calibrated (no band).
    """
    from dynosim.perf.error_bands import band
    from dynosim.perf.overhead import deployment_profile

    profile = deployment_profile(config)
    out: dict[str, dict[str, float]] = {}
    for name, kind in (("time_to_first_token", "ttft"), ("inter_token_latency", "tpot")):
        sigma = profile.sigma(config.backend, kind)
        if sigma <= 0:
            continue
        s = getattr(m, name)
        row: dict[str, float] = {"sigma": sigma}
        for k in ("avg", "p50", "p90", "p99"):
            lo, hi = band(getattr(s, k), sigma)
            row |= {k: getattr(s, k), f"{k}_low": lo, f"{k}_high": hi}
        out[name] = row
    return out


def bands_table(bands: dict[str, dict[str, float]]) -> Any:
    """The error bands as a rich table: value (low .. high) per statistic."""
    from rich.table import Table

    t = Table(title="with the calibration's +-1 sigma of log-error", title_justify="left")
    for col in ("metric", "sigma", "avg", "p50", "p90", "p99"):
        t.add_column(col, justify="left" if col == "metric" else "right", no_wrap=True)
    for name, row in bands.items():
        cells = [f"{row[k]:,.1f} ({row[k + '_low']:,.1f}..{row[k + '_high']:,.1f})"
                 for k in ("avg", "p50", "p90", "p99")]  # fmt: skip
        t.add_row(name, f"{row['sigma']:.3f}", *cells)
    return t


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
