"""Planner: when does autoscaling keep the SLO on a bursty trace, and at what cost?

Qwen3-32B on H200 (vLLM, TP1 workers, KV-aware routing) serves the Azure LLM inference
conversation trace (Splitwise 2023: 19,366 requests, 58 min, per-minute arrivals varying
185-509) replayed ``--speedup`` times faster (default 2: ~11 req/s on average), SLO
TTFT p90 <= 2 s and ITL p90 <= 60 ms. The sweeps, each one simulation per point:

* ``fixed``: no planner, 1-8 workers (the static baselines: the cheapest that holds the SLO);
* ``interval``: the SLA planner and the load planner (Dynamo's thresholds) with
  ``adjustment_interval_s`` in 1 ... 120 s, no cold start;
* ``cold_start``: both planners at a 10 s interval with ``startup_s`` in 0 ... 600 s;
* ``thresholds``: the load planner (10 s, no cold start) with ``queue_scale_up`` x
  ``kv_scale_down`` varied (on this workload KV usage stays at 6-16%, so Dynamo's 0.5
  scale-down threshold always holds);
* ``floor``: the SLA planner with ``min_workers`` 3 across cold starts.

Every planned run starts with 2 workers and may use 1-10 (``max_gpus`` 10). It writes
``results.csv`` (one row per run: TTFT/ITL p90, SLO attainment, time-averaged GPUs, cost per
million output tokens, scaling events) and ``planner.png``, and prints the table as Markdown::

    .venv/bin/python experiments/2026-12-planner/run.py              # ~2 min on one core
    .venv/bin/python experiments/2026-12-planner/run.py --max-requests 2000 --out /tmp/pl
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dynosim import DeploymentConfig, Simulation  # noqa: E402
from dynosim.perf.deployment import resolve  # noqa: E402
from dynosim.workload import head, load_trace  # noqa: E402

TRACE = ROOT.parent / "shared/data/traces/azure2023/AzureLLMInferenceTrace_conv.csv"
BASE: dict[str, Any] = {
    "model": "Qwen/Qwen3-32B",
    "gpu": "h200_sxm",
    "backend": "vllm",
    "tp": 1,
    "router": "kv_aware",
    "slo": {"ttft_ms": 2000, "itl_ms": 60},
}
PLANNER: dict[str, Any] = {
    "policy": "sla",
    "adjustment_interval_s": 10,
    "startup_s": 0,
    "min_workers": 1,
    "max_workers": 10,
    "max_gpus": 10,
}
INTERVALS = (1, 2, 5, 10, 20, 30, 60, 120)
COLD_STARTS = (0, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600)
THRESHOLDS = ((0.1, 0.5), (0.5, 0.5), (2.0, 0.5), (0.1, 0.05), (0.5, 0.05), (2.0, 0.05))
WARMUP = 200
FIELDS = (
    "sweep", "policy", "workers", "min_workers", "interval_s", "startup_s", "queue_scale_up",
    "kv_scale_down",
    "ttft_p90_ms", "itl_p90_ms", "slo_attainment", "meets_slo", "gpus_avg", "peak_workers",
    "cost_per_million_output_tokens", "scaling_events", "wall_s",
)  # fmt: skip


def main() -> None:
    """Run the sweeps and write the CSV and the figure."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--speedup", type=float, default=2.0)
    ap.add_argument("--max-requests", type=int)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--plot-only", action="store_true", help="redraw from OUT/results.csv")
    args = ap.parse_args()
    if args.plot_only:
        with (args.out / "results.csv").open() as f:
            rows = [_typed(r) for r in csv.DictReader(f)]
        plot(rows, args.out / "planner.png")
        print_markdown(rows)
        return
    reqs = load_trace(TRACE)
    if args.max_requests:
        reqs = head(reqs, args.max_requests)
    perf = resolve(DeploymentConfig.from_dict(BASE))
    rows: list[dict[str, Any]] = []

    def run(sweep: str, planner: dict[str, Any] | None, workers: int = 2) -> None:
        cfg = DeploymentConfig.from_dict({**BASE, "workers": workers, "planner": planner}
                                         if planner else {**BASE, "workers": workers})  # fmt: skip
        t0 = time.perf_counter()
        res = Simulation(cfg, reqs, perf=perf, speedup=args.speedup).run(warmup_requests=WARMUP)
        m = res.metrics
        p = planner or {}
        row = {
            "sweep": sweep,
            "policy": p.get("policy", "none"),
            "workers": workers,
            "interval_s": p.get("adjustment_interval_s", ""),
            "startup_s": p.get("startup_s", ""),
            "min_workers": p.get("min_workers", ""),
            "queue_scale_up": p.get("queue_scale_up", 0.5) if p.get("policy") == "load" else "",
            "kv_scale_down": p.get("kv_scale_down", 0.5) if p.get("policy") == "load" else "",
            "ttft_p90_ms": round(m.time_to_first_token.p90, 1),
            "itl_p90_ms": round(m.inter_token_latency.p90, 2),
            "slo_attainment": round(m.slo_attainment, 4),
            "meets_slo": m.time_to_first_token.p90 <= 2000 and m.inter_token_latency.p90 <= 60,
            "gpus_avg": round(m.gpus, 3),
            "peak_workers": m.pools[0].peak_workers,
            "cost_per_million_output_tokens": round(m.cost_per_million_output_tokens, 3),
            "scaling_events": m.scaling_events,
            "wall_s": round(time.perf_counter() - t0, 2),
        }
        rows.append(row)
        print(" ".join(f"{k}={row[k]}" for k in FIELDS if row[k] != ""), flush=True)

    for w in range(1, 9):
        run("fixed", None, workers=w)
    for policy in ("sla", "load"):
        for iv in INTERVALS:
            run("interval", {**PLANNER, "policy": policy, "adjustment_interval_s": iv})
    for policy in ("sla", "load"):
        for cs in COLD_STARTS:
            run("cold_start", {**PLANNER, "policy": policy, "startup_s": cs})
    for q, kv in THRESHOLDS:
        run("thresholds", {**PLANNER, "policy": "load", "queue_scale_up": q,
                           "queue_scale_down": min(0.2, q), "kv_scale_down": kv})  # fmt: skip
    for cs in COLD_STARTS:
        run("floor", {**PLANNER, "min_workers": 3, "startup_s": cs}, workers=3)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    plot(rows, args.out / "planner.png")
    print_markdown(rows)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Scaling events and SLO attainment vs interval; TTFT p90 and GPUs vs cold start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    fixed = [r for r in rows if r["sweep"] == "fixed" and r["meets_slo"]]
    for policy, marker in (("sla", "o"), ("load", "s")):
        sel = [r for r in rows if r["sweep"] == "interval" and r["policy"] == policy]
        x = [r["interval_s"] for r in sel]
        label = f"{policy} planner"
        axes[0].plot(x, [r["scaling_events"] for r in sel], marker=marker, label=label)
        axes[1].plot(x, [r["slo_attainment"] for r in sel], marker=marker, label=label)
    for ax in axes[:2]:
        ax.set_xscale("log")
        ax.set_xlabel("adjustment interval (s), no cold start")
        ax.legend()
    axes[0].set_ylabel("scaling events")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("SLO attainment (TTFT <= 2 s and ITL <= 60 ms)")
    ax = axes[2]
    for sweep, policy, color in (("cold_start", "sla", "C0"), ("cold_start", "load", "C1"),
                                 ("floor", "sla", "C4")):  # fmt: skip
        sel = [r for r in rows if r["sweep"] == sweep and r["policy"] == policy]
        x = [max(r["startup_s"], 1) for r in sel]
        label = f"{policy} planner" + (", min 3 workers" if sweep == "floor" else "")
        ax.plot(x, [r["ttft_p90_ms"] / 1e3 for r in sel], marker="o", color=color, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.axhline(2.0, color="red", ls="--", lw=1)
    ax.set_xlabel("cold start (s; 0 drawn at 1), interval 10 s")
    ax.set_ylabel("TTFT p90 (s); red: the 2 s SLO")
    ax.legend(loc="upper left")
    ax2 = ax.twinx()
    for sweep, policy, color in (("cold_start", "sla", "C0"), ("floor", "sla", "C4")):
        sel = [r for r in rows if r["sweep"] == sweep and r["policy"] == policy]
        x = [max(r["startup_s"], 1) for r in sel]
        ax2.plot(x, [r["gpus_avg"] for r in sel], ls=":", marker="^", color=color)
    if fixed:
        ax2.axhline(fixed[0]["gpus_avg"], color="k", ls="--", lw=1)
        ax2.text(1, fixed[0]["gpus_avg"], f" fixed {fixed[0]['workers']} workers", va="bottom")
    ax2.set_ylabel("GPUs, time-averaged (dotted)")
    fig.suptitle("Planners on the Azure conversation trace at 2x (Qwen3-32B, H200, TP1 workers)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _typed(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if v in ("True", "False"):
            out[k] = v == "True"
        else:
            try:
                out[k] = int(v)
            except ValueError:
                try:
                    out[k] = float(v)
                except ValueError:
                    out[k] = v
    return out


def print_markdown(rows: list[dict[str, Any]]) -> None:
    """The results as a Markdown table."""
    cols = ("sweep", "policy", "workers", "min_workers", "interval_s", "startup_s",
            "queue_scale_up", "kv_scale_down", "ttft_p90_ms", "itl_p90_ms", "slo_attainment",
            "gpus_avg", "cost_per_million_output_tokens", "scaling_events")  # fmt: skip
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
