"""KV-aware routing at capacity on both Mooncake traces: run the studies, write CSV + PNG.

Runs the two capacity studies of this folder (``conversation.yaml``, ``synthetic.yaml``:
router {round_robin, least_loaded, kv_aware x overlap weight {0, 0.5, 1, 2, 4}} on 8 x H200,
Llama-3.1-8B, vLLM, each judged at the highest trace speed-up at which TTFT p90 <= 2 s holds)
through the project's study driver (``search.run.driver.run_study``, as ``dynosim tune`` does),
and the same two studies again with ``inter_token_latency.p90 <= 50`` added (slo
``ttft+itl``, study names ending ``-itl``), then reads the stored trials back and writes

* ``results.csv``: one row per (trace, slo, router, overlap weight): capacity speed-up,
  capacity req/s, TTFT/ITL p90 at capacity, prefix-cache hit rate, the capacity search's probes
  and simulated requests in trace lengths (``capacity_full_runs``), gains over the baselines;
* ``studies.csv``: one row per study: wall time, trials, simulated requests;
* ``capacity.png``: capacity vs overlap weight per trace, the baselines as horizontal lines;
* ``check.csv`` (unless ``--no-check``): every config simulated again at 2, 3, 4 and 6 grid
  steps above its capacity (the search probed 1 step above), to catch non-monotone feasibility;

and prints the tables as Markdown. Run from anywhere::

    .venv/bin/python experiments/2026-12-kv-routing/run.py                  # everything, 11-23 min
    .venv/bin/python experiments/2026-12-kv-routing/run.py --max-requests 300 --no-check
        --out /tmp/kvr --storage /tmp/kvr/smoke.journal                     # smoke test, ~15 s
    .venv/bin/python experiments/2026-12-kv-routing/run.py --report-only    # reuse the storage

The storage (``runs/kv-routing/kv-routing.journal`` under the repository, gitignored) is
recreated on every full run, so the figures always come from one run of the current code.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from search.run.driver import run_study  # noqa: E402
from search.store.open import open_storage  # noqa: E402
from search.study.study_file import StudyFile, load_study_file  # noqa: E402
from search.study.workload import load_workload  # noqa: E402

TRACES = ("conversation", "synthetic")
SLOS: dict[str, list[str] | None] = {
    "ttft": None,  # the study files' own constraint: time_to_first_token.p90 <= 2000
    "ttft+itl": ["time_to_first_token.p90 <= 2000", "inter_token_latency.p90 <= 50"],
}
CHECK_STEPS = (2, 3, 4, 6)
DEFAULT_STORAGE = ROOT / "runs/kv-routing/kv-routing.journal"
BASELINES = ("round_robin", "least_loaded")
CSV_FIELDS = (
    "trace", "slo", "router", "overlap_weight", "load_level", "capacity_rps", "ttft_p90_ms",
    "itl_p90_ms", "prefix_cache_hit_rate", "capacity_probes", "capacity_full_runs",
    "capacity_at_limit", "gain_vs_round_robin_pct", "gain_vs_least_loaded_pct", "feasible",
    "reason",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Row:
    """One configuration's result at capacity.

    Attributes:
        trace: ``conversation`` or ``synthetic``.
        slo: ``ttft`` or ``ttft+itl``.
        router: ``round_robin``, ``least_loaded`` or ``kv_aware``.
        overlap_weight: The KV router's overlap weight (``None`` for the other routers).
        metrics: The trial's stored metrics (the run at capacity plus the search's figures).
        feasible: Some load met the SLO.
        reason: Why not, when not.
        wall_s: The trial's evaluation time.
    """

    trace: str
    slo: str
    router: str
    overlap_weight: float | None
    metrics: dict[str, float]
    feasible: bool
    reason: str | None
    wall_s: float

    def get(self, key: str) -> float:
        """A metric, NaN when missing."""
        return float(self.metrics.get(key, math.nan))


@dataclass(frozen=True, slots=True)
class StudyRun:
    """What one study cost.

    Attributes:
        trace: The trace name.
        slo: ``ttft`` or ``ttft+itl``.
        study: The study name in the storage.
        requests: Requests in the workload.
        wall_s: First trial start to last trial end (from the storage).
        trials: Completed trials.
        simulated_requests: Requests simulated over every probe of every trial.
    """

    trace: str
    slo: str
    study: str
    requests: int
    wall_s: float
    trials: int
    simulated_requests: float

    @property
    def mean_full_runs(self) -> float:
        """Simulated requests per configuration, in trace lengths."""
        if not self.trials or not self.requests:
            return math.nan
        return self.simulated_requests / self.trials / self.requests


def study_file(trace: str, slo: str, storage: Path, max_requests: int | None) -> StudyFile:
    """The study of ``trace`` under ``slo`` with this run's storage (and a request cap)."""
    overrides: dict[str, Any] = {"storage": str(storage), "workload.max_requests": max_requests}
    constraints = SLOS[slo]
    if constraints is not None:
        overrides.update(name=f"kv-routing-{trace}-itl", constraints=constraints)
    return load_study_file(HERE / f"{trace}.yaml", overrides)


def run_one(sf: StudyFile) -> float:
    """Run one study to the end of its grid; returns the wall time (workload load included)."""
    t0 = time.perf_counter()
    requests, warmup, name = load_workload(sf.workload, sf.load)
    print(f"{sf.name}: {len(requests)} requests, {warmup} warm-up", flush=True)

    def progress(state: Any) -> None:
        print(f"  {sf.name}: trial {state.n_trials}/{state.max_trials}", flush=True)

    state = run_study(sf, requests, warmup_requests=warmup, workload_name=name, progress=progress)
    wall = time.perf_counter() - t0
    print(f"{sf.name}: {state.status}, {state.n_trials} trials, {wall:.0f} s", flush=True)
    return wall


def read_study(sf: StudyFile, trace: str, slo: str) -> tuple[list[Row], StudyRun]:
    """The stored trials of one study as rows, and what the study cost."""
    import optuna

    study = optuna.load_study(study_name=sf.name, storage=open_storage(sf.storage, create=False))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    rows = []
    for t in done:
        u = t.user_attrs
        weight = t.params.get("kv_router.overlap_weight")
        rows.append(
            Row(
                trace=trace,
                slo=slo,
                router=str(t.params["router"]),
                overlap_weight=None if weight is None else float(weight),
                metrics={k: float(v) for k, v in u.get("metrics", {}).items()},
                feasible=bool(u.get("feasible")),
                reason=u.get("infeasible_reason"),
                wall_s=float(u.get("wall_s", math.nan)),
            )
        )
    starts = [t.datetime_start for t in done if t.datetime_start is not None]
    ends = [t.datetime_complete for t in done if t.datetime_complete is not None]
    wall = (max(ends) - min(starts)).total_seconds() if starts and ends else math.nan
    n_requests = _n_requests(rows)
    simulated = sum(r.get("capacity_simulated_requests") for r in rows)
    run = StudyRun(trace, slo, sf.name, n_requests, wall, len(rows), simulated)
    return rows, run


def _n_requests(rows: Sequence[Row]) -> int:
    """The workload size, from simulated requests / full runs of any trial."""
    for r in rows:
        full = r.get("capacity_full_runs")
        if full > 0:
            return round(r.get("capacity_simulated_requests") / full)
    return 0


def baseline(rows: Sequence[Row], trace: str, slo: str, router: str) -> float:
    """The capacity (req/s) of a baseline router on ``trace`` under ``slo`` (NaN if absent)."""
    for r in rows:
        if r.trace == trace and r.slo == slo and r.router == router:
            return r.get("capacity_rps")
    return math.nan


def gain_pct(value: float, base: float) -> float:
    """``value`` over ``base`` in percent (NaN without a positive base)."""
    return 100.0 * (value / base - 1.0) if base > 0 else math.nan


def write_csv(rows: Sequence[Row], path: Path) -> None:
    """One line per configuration (see ``CSV_FIELDS``)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_FIELDS)
        for r in rows:
            rr, ll = (baseline(rows, r.trace, r.slo, b) for b in BASELINES)
            cap = r.get("capacity_rps")
            w.writerow(
                [
                    r.trace, r.slo, r.router, "" if r.overlap_weight is None else r.overlap_weight,
                    _fmt(r.get("load_level"), 4), _fmt(cap, 4),
                    _fmt(r.get("time_to_first_token.p90"), 1),
                    _fmt(r.get("inter_token_latency.p90"), 2),
                    _fmt(r.get("prefix_cache_hit_rate"), 4), int(r.get("capacity_probes")),
                    _fmt(r.get("capacity_full_runs"), 3), int(r.get("capacity_at_limit")),
                    _fmt(gain_pct(cap, rr), 1), _fmt(gain_pct(cap, ll), 1), int(r.feasible),
                    r.reason or "",
                ]
            )  # fmt: skip


def write_studies_csv(runs: Sequence[StudyRun], walls: dict[str, float], path: Path) -> None:
    """One line per study: wall times, trials, simulated requests, mean full runs.

    ``walls``: this run's wall time per study name (a report-only run keeps the file's).
    """
    if path.exists():
        with path.open(newline="") as f:
            kept = {r["study"]: r["wall_s_run"] for r in csv.DictReader(f) if r["wall_s_run"]}
        walls = {**{k: float(v) for k, v in kept.items()}, **walls}
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["trace", "slo", "study", "requests", "trials", "wall_s_trials", "wall_s_run",
             "simulated_requests", "mean_full_runs_per_config"]
        )  # fmt: skip
        for s in runs:
            w.writerow(
                [s.trace, s.slo, s.study, s.requests, s.trials, _fmt(s.wall_s, 1),
                 _fmt(walls.get(s.study, math.nan), 1), int(s.simulated_requests),
                 _fmt(s.mean_full_runs, 2)]
            )  # fmt: skip


def _fmt(v: float, digits: int) -> str:
    return "" if math.isnan(v) else f"{v:.{digits}f}"


def markdown(rows: Sequence[Row], runs: Sequence[StudyRun]) -> str:
    """The results and costs as Markdown tables (for NOTES.md)."""
    out = [
        "| trace | SLO | router | overlap weight | capacity speed-up | capacity req/s "
        "| vs round-robin | vs least-loaded | TTFT p90 ms | ITL p90 ms | prefix hit "
        "| probes | full runs |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        rr, ll = (baseline(rows, r.trace, r.slo, b) for b in BASELINES)
        cap = r.get("capacity_rps")
        weight = "-" if r.overlap_weight is None else f"{r.overlap_weight:g}"
        limit = " (at limit)" if r.get("capacity_at_limit") > 0 else ""
        out.append(
            f"| {r.trace} | {r.slo} | {r.router} | {weight} | {r.get('load_level'):.3f}x{limit} "
            f"| {cap:.2f} | {gain_pct(cap, rr):+.1f}% | {gain_pct(cap, ll):+.1f}% "
            f"| {r.get('time_to_first_token.p90'):.0f} | {r.get('inter_token_latency.p90'):.1f} "
            f"| {r.get('prefix_cache_hit_rate'):.3f} | {r.get('capacity_probes'):.0f} "
            f"| {r.get('capacity_full_runs'):.2f} |"
        )
    out += [
        "",
        "| trace | SLO | requests | configs | wall s | simulated requests "
        "| mean full runs per config |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {s.trace} | {s.slo} | {s.requests:,} | {s.trials} | {s.wall_s:.0f} "
        f"| {s.simulated_requests:,.0f} | {s.mean_full_runs:.2f} |"
        for s in runs
    ]
    return "\n".join(out)


def plot(rows: Sequence[Row], traces: Sequence[str], path: Path) -> None:
    """Capacity (req/s) vs overlap weight, one panel per trace, baselines as lines.

    Solid: TTFT p90 <= 2 s only; dotted, hollow: with ITL p90 <= 50 ms too.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(traces), figsize=(5.6 * len(traces), 5.0), squeeze=False)
    styles = {"ttft": ("-", "--", "o", "full"), "ttft+itl": (":", ":", "s", "none")}
    for ax, trace in zip(axes[0], traces, strict=True):
        shown: list[float] = []
        for slo, (line, base_line, marker, fill) in styles.items():
            kv = sorted(
                (r for r in rows if r.trace == trace and r.slo == slo and r.router == "kv_aware"),
                key=lambda r: r.overlap_weight or 0.0,
            )
            if not kv:
                continue
            xs = list(range(len(kv)))
            ys = [r.get("capacity_rps") for r in kv]
            tag = "TTFT p90 <= 2 s" if slo == "ttft" else "+ ITL p90 <= 50 ms"
            ax.plot(xs, ys, line, marker=marker, fillstyle=fill, color="tab:green",
                    label=f"kv_aware ({tag})")  # fmt: skip
            for x, r in zip(xs, kv, strict=True):
                ax.annotate(f"{r.get('load_level'):.2f}x", (x, r.get("capacity_rps")),
                            textcoords="offset points", xytext=(0, 6 if slo == "ttft" else -12),
                            ha="center", fontsize=7)  # fmt: skip
            ax.set_xticks(xs, [f"{r.overlap_weight:g}" for r in kv])
            shown += ys
            for router, color in zip(BASELINES, ("tab:red", "tab:blue"), strict=True):
                y = baseline(rows, trace, slo, router)
                if y > 0:
                    ax.axhline(y, color=color, linestyle=base_line, label=f"{router} ({tag})")
                    shown.append(y)
        ax.set_xlabel("KV-router overlap weight (labels: capacity trace speed-up)")
        ax.set_ylabel("capacity (req/s)")
        ax.set_title(f"Mooncake {trace} trace")
        ax.set_ylim(0, 1.2 * max([v for v in shown if v > 0], default=1.0))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.suptitle("Llama-3.1-8B, 8 x H200 (TP1), vLLM, prefix caching: capacity by router",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def check_monotone(sf: StudyFile, rows: Sequence[Row], path: Path) -> list[list[Any]]:
    """Simulate each config at ``CHECK_STEPS`` grid steps above its capacity (early stop on).

    Returns the lines written: a feasible one means feasibility is not monotone there and the
    capacity search (which assumes it is) may have stopped below the true capacity.
    """
    from search.run.evaluate import EvalContext, run_probe

    requests, warmup, _ = load_workload(sf.workload, sf.load)
    ctx = EvalContext(problem=sf.problem, workload_id="check", seed=sf.seed,
                      warmup_requests=warmup, load=sf.load, axis=sf.axis)  # fmt: skip
    ratio = 1.0 + sf.load.tolerance
    out = []
    for r in rows:
        level = r.get("load_level")
        if not r.feasible or not level > 0:
            continue
        params: dict[str, Any] = {"router": r.router}
        if r.overlap_weight is not None:
            params["kv_router.overlap_weight"] = r.overlap_weight
        config = sf.problem.to_config(params)
        for j in CHECK_STEPS:
            p = run_probe(ctx, config, requests, level * ratio**j)
            out.append([r.trace, r.slo, r.router, "" if r.overlap_weight is None else
                        r.overlap_weight, _fmt(level, 4), j, _fmt(p.level, 4), int(p.feasible),
                        int(p.stopped), _fmt(p.metrics.get("time_to_first_token.p90", math.nan),
                        1), p.simulated_requests])  # fmt: skip
            print(f"  check {r.trace} {r.slo} {r.router} {r.overlap_weight}: +{j} steps "
                  f"{'FEASIBLE' if p.feasible else 'infeasible'}", flush=True)  # fmt: skip
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["trace", "slo", "router", "overlap_weight", "capacity_level",
                        "steps_above", "level", "feasible", "stopped_early", "ttft_p90_ms",
                        "simulated_requests"])  # fmt: skip
        w.writerows(out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or re-read) the studies and write the CSVs, the PNG and a Markdown table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traces", nargs="+", choices=TRACES, default=list(TRACES))
    p.add_argument("--slos", nargs="+", choices=list(SLOS), default=list(SLOS))
    p.add_argument("--max-requests", type=int, help="first N requests only (a smoke test)")
    p.add_argument("--storage", type=Path, default=DEFAULT_STORAGE, help="journal file")
    p.add_argument("--out", type=Path, default=HERE, help="folder for the CSVs and the PNG")
    p.add_argument("--report-only", action="store_true", help="read the stored studies only")
    p.add_argument("--no-check", action="store_true", help="skip check.csv (monotonicity)")
    args = p.parse_args(argv)
    storage: Path = args.storage.resolve()
    if not args.report_only and storage.exists():
        storage.unlink()  # this script's own journal: a fresh run of the current code
    studies = {
        (t, slo): study_file(t, slo, storage, args.max_requests)
        for t in args.traces
        for slo in args.slos
    }
    walls: dict[str, float] = {}
    if not args.report_only:
        for sf in studies.values():
            walls[sf.name] = run_one(sf)
    rows: list[Row] = []
    runs: list[StudyRun] = []
    for (trace, slo), sf in studies.items():
        r, s = read_study(sf, trace, slo)
        rows += r
        runs.append(s)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out / "results.csv")
    write_studies_csv(runs, walls, args.out / "studies.csv")
    plot(rows, list(args.traces), args.out / "capacity.png")
    print(markdown(rows, runs))
    if not args.no_check and not args.report_only:
        check = args.out / "check.csv"
        check.unlink(missing_ok=True)
        bad = []
        for (trace, slo), sf in studies.items():
            mine = [r for r in rows if r.trace == trace and r.slo == slo]
            bad += [line for line in check_monotone(sf, mine, check) if line[7]]
        print(f"monotonicity check: {len(bad)} feasible level(s) above a capacity; see {check}")
    print(f"wrote {args.out / 'results.csv'}, studies.csv, capacity.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
