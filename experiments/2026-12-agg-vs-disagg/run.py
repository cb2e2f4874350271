"""Agg vs disagg for Qwen3-32B on 16 H200: both fronts at capacity, by input length and load.

For each workload — synthetic ISL 2,048 / 8,192 / 32,768 with OSL 256 (``workloads/isl*.yaml``,
Poisson)
and the first 2,000 requests of the Mooncake conversation trace — it runs two exhaustive grid
studies through the project's study driver (as ``dynosim tune`` does): ``agg.yaml`` (TP 1-8,
workers = 16 / TP, both routers, two token budgets) and ``disagg.yaml`` (prefill TP x workers
and decode TP x workers within 16 GPUs). Every configuration is judged at its capacity: the
highest load (Poisson rate, or trace speed-up) at which TTFT p90 <= 5 s (4 s on Mooncake, see
``MOONCAKE_TTFT_MS``) and ITL p90 <= 50 ms hold. Then:

* ``trials.csv``: every configuration: mode, pools, capacity, throughput per GPU and per user
  at capacity, TTFT/ITL p90 there, or why it is infeasible;
* ``fronts.png``: per workload, the agg and disagg Pareto fronts (throughput per GPU vs per
  user at capacity) overlaid;
* ``load.csv`` / ``load.png``: the best agg and the best disagg configuration of the 2k and
  the 32k workloads at the same load per GPU, 0.25-1.5x the higher capacity per GPU of the
  two: where each wins as load grows;
* ``dynosim_example.csv``: DynoSim's published winner (prefill TP4 x 3 + decode TP1 x 4,
  KV-aware routing) and our winners, saturated (a rate far above capacity), so their output
  throughput compares with DynoSim's 958.9 tok/s;

and prints the tables as Markdown. Run from anywhere::

    .venv/bin/python experiments/2026-12-agg-vs-disagg/run.py               # ~15-25 min
    .venv/bin/python experiments/2026-12-agg-vs-disagg/run.py --report-only  # reuse the storage

The storage (``runs/agg-vs-disagg/pd.journal`` under the repository, gitignored) is recreated
on every full run.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dynosim import DeploymentConfig, Simulation  # noqa: E402
from dynosim.workload import load_workload_file  # noqa: E402
from dynosim.workload.transforms import speedup as speed_up  # noqa: E402
from search.run.driver import run_study  # noqa: E402
from search.store.open import open_storage  # noqa: E402
from search.study.study_file import StudyFile, load_study_file  # noqa: E402
from search.study.workload import load_workload  # noqa: E402

STORAGE = ROOT / "runs/agg-vs-disagg/pd.journal"
WORKLOADS = HERE / "workloads"
MOONCAKE = ROOT.parent / "shared/data/traces/mooncake/conversation_trace.jsonl"
CASES = ("isl2k", "isl8k", "isl32k", "mooncake")
MOONCAKE_TTFT_MS = 4000
"""TTFT p90 bound on the Mooncake trace: its long prompts put TTFT p90 at ~1.9 s with no load at
all on the fastest aggregated pools (2.1 s disaggregated), so 2 s would leave nothing to compare."""
MODES = ("agg", "disagg")
KNOBS = ("tp", "router", "engine.max_num_batched_tokens", "prefill.tp", "prefill.workers",
         "decode.tp", "decode.workers")  # fmt: skip
FIELDS = (
    "case", "mode", "config", "gpus", "feasible", "capacity_rps", "load_level",
    "tok_s_per_gpu", "tok_s_per_user", "ttft_p90_ms", "itl_p90_ms", "kv_transfer_ms",
    "reason", *KNOBS,
)  # fmt: skip


def study(case: str, mode: str) -> StudyFile:
    """The grid study of ``mode`` on workload ``case``."""
    over: dict[str, Any] = {"name": f"pd-{mode}-{case}", "storage": str(STORAGE)}
    if case == "mooncake":
        over |= {
            "workload": {"trace": str(MOONCAKE), "max_requests": 2000, "warmup_requests": 100},
            "deployment.slo.ttft_ms": MOONCAKE_TTFT_MS,
            "constraints": [
                f"time_to_first_token.p90 <= {MOONCAKE_TTFT_MS}",
                "inter_token_latency.p90 <= 50",
            ],
        }
    else:
        over["workload"] = {"file": str(WORKLOADS / f"{case}.yaml")}
    return load_study_file(HERE / f"{mode}.yaml", over)


def run_one(sf: StudyFile) -> float:
    """Run one study afresh to the end of its grid; the wall time."""
    import optuna

    storage = open_storage(sf.storage, create=True)
    if sf.name in {s.study_name for s in optuna.get_all_study_summaries(storage)}:
        optuna.delete_study(study_name=sf.name, storage=storage)
    t0 = time.perf_counter()
    requests, warmup, name = load_workload(sf.workload, sf.load)
    state = run_study(sf, requests, warmup_requests=warmup, workload_name=name)
    wall = time.perf_counter() - t0
    print(f"{sf.name}: {state.status}, {state.n_trials} trials, {wall:.0f} s", flush=True)
    return wall


def read(case: str, mode: str) -> list[dict[str, Any]]:
    """The stored trials of one study as rows."""
    import optuna

    sf = study(case, mode)
    st = optuna.load_study(study_name=sf.name, storage=open_storage(sf.storage, create=False))
    rows = []
    for t in st.trials:
        if t.state != optuna.trial.TrialState.COMPLETE:
            continue
        u, p = t.user_attrs, t.params
        m = {k: float(v) for k, v in (u.get("metrics") or {}).items()}
        if mode == "agg":
            tp = int(p["tp"])
            desc, gpus = f"agg TP{tp} x {16 // tp}", 16
        else:
            pools = ("prefill.tp", "prefill.workers", "decode.tp", "decode.workers")
            pt, pw, dt, dw = (int(p[k]) for k in pools)
            desc, gpus = f"P TP{pt} x {pw} + D TP{dt} x {dw}", pt * pw + dt * dw
            if gpus > 16:
                continue  # over the budget: never simulated
        rows.append({
            "case": case, "mode": mode, "config": desc, "gpus": gpus,
            "feasible": bool(u.get("feasible")),
            "capacity_rps": m.get("capacity_rps", math.nan),
            "load_level": m.get("load_level", math.nan),
            "tok_s_per_gpu": m.get("capacity_output_tokens_per_s_per_gpu", math.nan),
            "tok_s_per_user": m.get("output_token_throughput_per_user.avg", math.nan),
            "ttft_p90_ms": m.get("time_to_first_token.p90", math.nan),
            "itl_p90_ms": m.get("inter_token_latency.p90", math.nan),
            "kv_transfer_ms": m.get("kv_transfer_time.avg", math.nan),
            "reason": u.get("infeasible_reason") or "",
            **{k: p.get(k, "") for k in KNOBS},
        })  # fmt: skip
    return rows


def front(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The feasible rows no other feasible row beats on both objectives, by per-user speed."""
    ok = [r for r in rows if r["feasible"] and math.isfinite(r["tok_s_per_gpu"])]

    def key(r: dict[str, Any]) -> tuple[float, float]:
        return (r["tok_s_per_gpu"], r["tok_s_per_user"])

    out = [
        r
        for r in ok
        if not any(
            key(o)[0] >= key(r)[0] and key(o)[1] >= key(r)[1] and key(o) != key(r) for o in ok
        )
    ]
    return sorted(out, key=lambda r: r["tok_s_per_user"])


def best(rows: list[dict[str, Any]], case: str, mode: str) -> dict[str, Any] | None:
    """The highest throughput per GPU at capacity of one mode on one workload."""
    ok = [r for r in rows if r["case"] == case and r["mode"] == mode and r["feasible"]]
    return max(ok, key=lambda r: r["tok_s_per_gpu"]) if ok else None


def deployment(row: dict[str, Any], slo_ttft_ms: float = 5000) -> DeploymentConfig:
    """The deployment of a trial row."""
    base: dict[str, Any] = {"model": "Qwen/Qwen3-32B", "gpu": "h200_sxm", "backend": "vllm",
                            "slo": {"ttft_ms": slo_ttft_ms, "itl_ms": 50}}  # fmt: skip
    if row["mode"] == "agg":
        tp = int(row["tp"])
        return DeploymentConfig.from_dict({
            **base, "tp": tp, "workers": 16 // tp, "router": row["router"],
            "engine": {"max_num_batched_tokens": int(row["engine.max_num_batched_tokens"])},
        })  # fmt: skip
    return disagg(int(row["prefill.tp"]), int(row["prefill.workers"]), int(row["decode.tp"]),
                  int(row["decode.workers"]), base)  # fmt: skip


def disagg(pt: int, pw: int, dt: int, dw: int, base: dict[str, Any]) -> DeploymentConfig:
    """A disaggregated deployment as ``disagg.yaml`` builds them."""
    return DeploymentConfig.from_dict({
        **base, "mode": "disagg", "router": "kv_aware", "decode_router": "least_loaded",
        "prefill": {"tp": pt, "workers": pw, "engine": {"max_num_batched_tokens": 16384}},
        "decode": {"tp": dt, "workers": dw},
    })  # fmt: skip


SWEEP_CASES = {"isl2k": 16.0, "isl32k": 1.0}
"""Workloads swept across load, with the Poisson rate their file is written at."""


def load_sweep(rows: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Best agg and best disagg of the swept workloads across loads."""
    res = []
    for case, file_rate in SWEEP_CASES.items():
        res += _sweep_case(rows, case, file_rate)
    _write(out / "load.csv", res)
    return res


def _sweep_case(rows: list[dict[str, Any]], case: str, file_rate: float) -> list[dict[str, Any]]:
    spec = load_workload_file(WORKLOADS / f"{case}.yaml")
    agg_row, dis_row = best(rows, case, "agg"), best(rows, case, "disagg")
    if agg_row is None or dis_row is None:
        return []
    # the same load per GPU for both (they may differ in size): fractions of the higher
    # capacity per GPU of the two
    top = max(r["capacity_rps"] / r["gpus"] for r in (agg_row, dis_row))
    res = []
    for frac in (0.25, 0.5, 0.75, 1.0, 1.25, 1.5):
        for row in (agg_row, dis_row):
            rate = top * frac * row["gpus"]
            reqs = speed_up(list(spec.requests), rate / file_rate)
            m = Simulation(deployment(row), reqs).run(warmup_requests=spec.warmup_requests).metrics
            res.append({
                "case": case, "config": row["config"], "mode": row["mode"],
                "rate_rps": round(rate, 3), "rate_per_gpu": round(rate / row["gpus"], 4),
                "load_fraction": frac, "ttft_p90_ms": round(m.time_to_first_token.p90, 1),
                "itl_p90_ms": round(m.inter_token_latency.p90, 2),
                "tok_s_per_gpu": round(m.output_token_throughput_per_gpu, 2),
                "tok_s_per_user": round(m.output_token_throughput_per_user.avg, 2),
            })  # fmt: skip
    return res


def dynosim_example(rows: list[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """DynoSim's winner and ours on the 32k workload, saturated at 8 req/s."""
    spec = load_workload_file(WORKLOADS / "isl32k.yaml")
    reqs = speed_up(list(spec.requests), 8.0)
    base: dict[str, Any] = {"model": "Qwen/Qwen3-32B", "gpu": "h200_sxm", "backend": "vllm",
                            "slo": {"ttft_ms": 5000, "itl_ms": 50}}  # fmt: skip
    cands = [("DynoSim's winner: P TP4 x 3 + D TP1 x 4", disagg(4, 3, 1, 4, base))]
    for mode in MODES:
        r = best(rows, "isl32k", mode)
        if r is not None:
            cands.append((f"our best {mode}: {r['config']}", deployment(r)))
    res = []
    for label, cfg in cands:
        m = Simulation(cfg, reqs).run(warmup_requests=spec.warmup_requests).metrics
        res.append({
            "config": label, "gpus": cfg.gpus,
            "output_tok_s": round(m.output_token_throughput, 1),
            "ttft_avg_ms": round(m.time_to_first_token.avg, 1),
            "tpot_avg_ms": round(m.inter_token_latency.avg, 2),
        })  # fmt: skip
    _write(out / "dynosim_example.csv", res)
    return res


def plot_fronts(rows: list[dict[str, Any]], path: Path) -> None:
    """Both fronts per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CASES), figsize=(5 * len(CASES), 4.4))
    titles = {"isl2k": "ISL 2k / OSL 256", "isl8k": "ISL 8k / OSL 256",
              "isl32k": "ISL 32k / OSL 256", "mooncake": "Mooncake conversation"}  # fmt: skip
    for ax, case in zip(axes, CASES, strict=True):
        for mode, color in (("agg", "C0"), ("disagg", "C3")):
            sel = [r for r in rows if r["case"] == case and r["mode"] == mode]
            ok = [r for r in sel if r["feasible"]]
            ax.scatter([r["tok_s_per_user"] for r in ok], [r["tok_s_per_gpu"] for r in ok],
                       s=10, color=color, alpha=0.3)  # fmt: skip
            f = front(sel)
            label = f"{mode} front ({len(ok)} feasible)"
            ax.plot([r["tok_s_per_user"] for r in f], [r["tok_s_per_gpu"] for r in f],
                    marker="o", color=color, label=label)  # fmt: skip
        ax.set_title(titles[case])
        ax.set_xlabel("output tok/s per user at capacity")
        ax.set_ylabel("output tok/s per GPU at capacity")
        ax.legend()
    fig.suptitle("Qwen3-32B on 16 H200 (vLLM): aggregated vs disaggregated, SLO-bound capacity")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_load(res: list[dict[str, Any]], path: Path) -> None:
    """TTFT and ITL p90 vs load of the two winners of each swept workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [c for c in SWEEP_CASES if any(r["case"] == c for r in res)]
    fig, axes = plt.subplots(len(cases), 2, figsize=(11, 4.0 * len(cases)), squeeze=False)
    for row_axes, case in zip(axes, cases, strict=True):
        for mode, color in (("agg", "C0"), ("disagg", "C3")):
            sel = [r for r in res if r["case"] == case and r["mode"] == mode]
            x = [r["rate_per_gpu"] for r in sel]
            label = sel[0]["config"]
            row_axes[0].plot(x, [r["ttft_p90_ms"] / 1e3 for r in sel], marker="o",
                             color=color, label=label)  # fmt: skip
            row_axes[1].plot(x, [r["itl_p90_ms"] for r in sel], marker="o", color=color,
                             label=label)  # fmt: skip
        row_axes[0].axhline(5.0, color="red", ls="--", lw=1)
        row_axes[0].set_yscale("log")
        row_axes[0].set_ylabel("TTFT p90 (s)")
        row_axes[1].axhline(50.0, color="red", ls="--", lw=1)
        row_axes[1].set_ylabel("ITL p90 (ms)")
        for ax in row_axes:
            ax.set_xlabel(f"Poisson rate per GPU (req/s), {case} (OSL 256)")
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _md(rows: list[dict[str, Any]], cols: tuple[str, ...]) -> None:
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = [f"{r[c]:,.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    """Run (or reuse) the studies and write the outputs."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--only", default=",".join(CASES), help="comma-separated workloads")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    cases = [c for c in CASES if c in args.only.split(",")]
    if not args.report_only:
        STORAGE.parent.mkdir(parents=True, exist_ok=True)
        if set(cases) == set(CASES):
            STORAGE.unlink(missing_ok=True)
        for case in cases:
            for mode in MODES:
                run_one(study(case, mode))
    rows = [r for case in cases for mode in MODES for r in read(case, mode)]
    args.out.mkdir(parents=True, exist_ok=True)
    _write(args.out / "trials.csv", [{k: r[k] for k in FIELDS} for r in rows])
    plot_fronts(rows, args.out / "fronts.png")
    cols = ("case", "mode", "config", "gpus", "capacity_rps", "tok_s_per_gpu", "tok_s_per_user",
            "ttft_p90_ms", "itl_p90_ms")  # fmt: skip
    print("\nBest per workload and mode (throughput per GPU at capacity):")
    _md([b for c in cases for m in MODES if (b := best(rows, c, m)) is not None], cols)
    print("\nFronts:")
    _md([r for c in cases for m in MODES for r in front(
        [x for x in rows if x["case"] == c and x["mode"] == m])], cols)  # fmt: skip
    if "isl32k" in cases:
        res = load_sweep(rows, args.out)
        plot_load(res, args.out / "load.png")
        print("\nLoad sweep:")
        _md(res, ("case", "config", "rate_rps", "rate_per_gpu", "load_fraction", "ttft_p90_ms",
                  "itl_p90_ms", "tok_s_per_gpu", "tok_s_per_user"))  # fmt: skip
        print("\nDynoSim's example, saturated at 8 req/s:")
        _md(dynosim_example(rows, args.out),
            ("config", "gpus", "output_tok_s", "ttft_avg_ms", "tpot_avg_ms"))  # fmt: skip


if __name__ == "__main__":
    main()
