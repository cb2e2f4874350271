"""Search efficiency: hypervolume each sampler reaches on a small budget, against the full grid.

What it measures: on the benchmark study (``experiments/2026-12-search-efficiency/study.yaml``:
``spaces/bench_grid.yaml``, 1,440 grid points, the first 1,000 Mooncake conversation requests),

1. the exhaustive grid, evaluated once with the project's evaluator (``RayEvaluator``, 2 CPUs) and
   cached under ``runs/bench/`` keyed by the study's problem, the workload digest, the simulation
   seed and the simulator's source, so a stale cache is never reused;
2. the hypervolume (moocore) of the grid's feasible front with fixed normalisation bounds (the
   grid's feasible min/max per objective) and reference point 1.1 (``search.results.hypervolume``);
3. for each sampler and seed, the real study driver (``search.run.driver.run_study``: ask/tell,
   dedupe by config hash, stop rules) with an evaluator that answers every proposal from the
   grid cache (the simulator is deterministic for a given seed, so a lookup equals a simulation);
   the hypervolume (same bounds and reference) is recorded after 1%, 2%, 5% and 10% of the
   grid's size in trials, counted as the driver counts them: one trial per distinct config
   hash, including configs over the GPU budget (recorded as infeasible without simulating);
   a repeated proposal is told the earlier result and costs nothing.

The sampler seed varies (``--seeds``); simulations always use the study's seed (the cache), as
the sampler's seed is the quantity under test. A proposal outside the grid is reported as a bug.

Run::

    .venv/bin/python benchmarks/search_efficiency.py                  # all samplers, seeds 0 1 2
    .venv/bin/python benchmarks/search_efficiency.py --samplers tpe tpe:n_startup_trials=5 \
        --seeds 0 1 2 --budgets 0.01 0.02 0.05 0.1

A sampler is ``NAME`` or ``NAME:KEY=VALUE,...`` with the settings ``search.optimizers`` accepts.
``gp`` needs torch (not a project dependency); without it the sampler is skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from search.results.hypervolume import REFERENCE, HypervolumeTracker  # noqa: E402
from search.run.driver import RunState, run_study  # noqa: E402
from search.run.evaluate import EvalContext, evaluate_one, prepare  # noqa: E402
from search.store.open import open_storage  # noqa: E402
from search.store.record import StudyRecord  # noqa: E402
from search.study.space import Params  # noqa: E402
from search.study.study_file import StudyFile, load_study_file  # noqa: E402
from search.study.workload import load_workload  # noqa: E402
from search.trial import TrialResult, params_key, workload_id  # noqa: E402

DEFAULT_STUDY = ROOT / "experiments/2026-12-search-efficiency/study.yaml"
DEFAULT_CACHE_DIR = ROOT / "runs/bench"
DEFAULT_SAMPLERS = ("pymoo-nsga2", "optuna-nsga2", "tpe", "gp", "random")
DEFAULT_BUDGETS = (0.01, 0.02, 0.05, 0.10)
HV_TARGET = 0.98
TARGET_BUDGET = 0.05


# -- the grid cache -------------------------------------------------------------------------


def simulator_digest() -> str:
    """A digest of the simulator's and the scorer's source and the simulator's data files.

    The data files (``dynosim/**/*.yaml``: the shipped calibration profile) change the results
    as much as the code does; a refit alone must invalidate the cache too.
    """
    h = hashlib.sha256()
    for pkg in ("dynosim", "search"):
        files = [*(ROOT / pkg).rglob("*.py"), *(ROOT / pkg).rglob("*.yaml")]
        for path in sorted(files):
            if pkg == "search" and path.name not in ("problem.py", "evaluator.py"):
                continue
            h.update(str(path.relative_to(ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_key(sf: StudyFile, wid: str, warmup: int) -> str:
    """Key of the grid cache: problem (space, base, objectives, constraints), workload, seed."""
    p = sf.problem
    blob = {
        "space": sf.data["space"],
        "base": dict(p.base),
        "gpu_budget": p.gpu_budget,
        "objectives": [o.to_dict() for o in p.objectives],
        "constraints": p.constraint_dicts(),
        "workload": wid,
        "warmup": warmup,
        "seed": sf.seed,
        "simulator": simulator_digest(),
    }
    text = json.dumps(blob, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _to_json(r: TrialResult) -> dict[str, Any]:
    d = asdict(r)
    d["values"], d["constraints"] = list(r.values), list(r.constraints)
    return d


def _from_json(d: dict[str, Any]) -> TrialResult:
    return TrialResult(
        **{**d, "values": tuple(d["values"]), "constraints": tuple(d["constraints"])}
    )


def evaluate_grid(
    ctx: EvalContext, requests: Sequence[Any], num_cpus: int
) -> tuple[list[TrialResult], float]:
    """Evaluate every grid point with ``RayEvaluator``, filling its slots as the driver does.

    Configs that cannot be built (over the GPU budget) are scored in-process without a
    simulation, as the driver records them.

    Returns:
        The results in grid order, and the wall time excluding Ray start-up.
    """
    from search.run.ray_evaluator import RayEvaluator

    points = list(ctx.problem.space.grid())
    out: list[TrialResult | None] = [None] * len(points)
    ev = RayEvaluator(ctx, requests, num_cpus=num_cpus)
    try:
        t0 = time.perf_counter()
        todo = deque(range(len(points)))
        done = 0
        while todo or ev.in_flight:
            while todo and ev.in_flight < ev.capacity:
                i = todo.popleft()
                config = prepare(ctx, points[i]).config
                if config is None:
                    out[i] = evaluate_one(ctx, points[i], ())
                    done += 1
                else:
                    ev.submit(i, points[i])
            for i, r in ev.wait():
                out[i] = r
                done += 1
                if done % 100 == 0:
                    rate = done / (time.perf_counter() - t0)
                    print(f"  grid: {done}/{len(points)} ({rate:.1f}/s)", flush=True)
        wall = time.perf_counter() - t0
    finally:
        ev.close()
    assert all(r is not None for r in out)
    return [r for r in out if r is not None], wall


def load_or_build_grid(
    sf: StudyFile, requests: Sequence[Any], warmup: int, wname: str, cache: Path, num_cpus: int
) -> tuple[list[TrialResult], dict[str, Any]]:
    """The grid results, from ``cache`` (a file or a directory) or evaluated and cached."""
    wid = workload_id(requests, wname)
    key = cache_key(sf, wid, warmup)
    path = cache / f"grid-{sf.name}-{key}.json" if cache.suffix != ".json" else cache
    if path.is_file():
        data = json.loads(path.read_text())
        if data.get("key") == key:
            print(f"grid cache: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
            return [_from_json(d) for d in data["results"]], data["meta"]
        print(f"grid cache {path} is stale (key {data.get('key')} != {key}); re-evaluating")
    ctx = EvalContext(problem=sf.problem, workload_id=wid, seed=sf.seed, warmup_requests=warmup)
    print(f"evaluating the grid ({sf.problem.space.grid_size()} points) on {num_cpus} CPUs ...")
    results, wall = evaluate_grid(ctx, requests, num_cpus)
    sims = [r.wall_s for r in results if r.runnable or "GPU budget" not in (r.reason or "")]
    meta = {
        "points": len(results),
        "simulated": len(sims),
        "feasible": sum(r.feasible for r in results),
        "wall_s": wall,
        "num_cpus": num_cpus,
        "sim_mean_s": statistics.fmean(sims) if sims else 0.0,
        "sim_p50_s": statistics.median(sims) if sims else 0.0,
        "sim_max_s": max(sims) if sims else 0.0,
        "workload_id": wid,
        "requests": len(requests),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"key": key, "meta": meta, "results": [_to_json(r) for r in results]})
    )
    print(f"grid cached: {path}")
    return results, meta


# -- hypervolume with fixed bounds -----------------------------------------------------------


def fixed_reference(directions: Sequence[str], grid: Sequence[TrialResult]) -> dict[str, Any]:
    """Normalisation bounds from the grid's feasible min/max; reference point 1.1."""
    feasible = [r.values for r in grid if r.feasible]
    if not feasible:
        raise SystemExit("the grid has no feasible point: the benchmark is meaningless")
    bounds = []
    for i in range(len(directions)):
        col = [v[i] for v in feasible]
        bounds.append([min(col), max(col)])
    return {"point": [REFERENCE] * len(directions), "bounds": bounds}


def hypervolume(
    directions: Sequence[str], reference: dict[str, Any], values: Sequence[Sequence[float]]
) -> float:
    """Normalised hypervolume of the feasible objective vectors ``values``."""
    t = HypervolumeTracker(directions, reference=reference)
    t.add(values)
    return t.hypervolume()


# -- driving the real driver from the cache ---------------------------------------------------


class CachedEvaluator:
    """An ``Evaluator`` that answers from the grid cache, completing the oldest first.

    ``capacity`` mirrors the Ray runtime's CPUs so the driver asks in the same batch sizes as on
    this machine. Every submitted point must be a grid point; one that is not is recorded in
    ``off_grid`` and answered with a penalty so the run can finish and be reported.
    """

    def __init__(
        self,
        ctx: EvalContext,
        by_key: dict[str, TrialResult],
        capacity: int,
        on_result: Callable[[TrialResult], None],
    ) -> None:
        self._ctx = ctx
        self._by_key = by_key
        self._capacity = capacity
        self._queue: deque[tuple[int, Params]] = deque()
        self._on_result = on_result
        self.off_grid: list[Params] = []

    @property
    def capacity(self) -> int:
        """Concurrent evaluations, as the Ray runtime would have."""
        return self._capacity

    @property
    def in_flight(self) -> int:
        """Submitted, not yet returned."""
        return len(self._queue)

    def submit(self, tag: int, params: Params, *, hint: float | None = None) -> None:
        """Queue ``params``."""
        self._queue.append((tag, params))

    def wait(self) -> list[tuple[int, TrialResult]]:
        """Return the oldest submission's cached result (one at a time)."""
        if not self._queue:
            return []
        tag, params = self._queue.popleft()
        cached = self._by_key.get(params_key(params))
        prepared = prepare(self._ctx, params)
        data, digest = prepared.data, prepared.config_hash
        if cached is None:
            self.off_grid.append(dict(params))
            score = self._ctx.problem.penalty("not a grid point")
            result = TrialResult(
                params=dict(params), config=data, config_hash=digest, metrics={},
                values=score.values, constraints=score.constraints, feasible=False,
                reason=score.reason, seed=self._ctx.seed, wall_s=0.0,
            )  # fmt: skip
        else:
            result = replace(cached, params=dict(params), config_hash=digest, seed=self._ctx.seed)
        self._on_result(result)
        return [(tag, result)]

    def close(self) -> None:
        """Drop anything queued."""
        self._queue.clear()


@dataclass(slots=True)
class RunOutcome:
    """One sampler run: hypervolume after each budget and what the driver counted."""

    hv: dict[int, float]
    trials: int
    duplicates: int
    status: str
    off_grid: list[Params]
    wall_s: float


def parse_sampler(spec: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME:KEY=VALUE,...`` into a name and settings (values as YAML scalars)."""
    import yaml

    name, _, rest = spec.partition(":")
    settings: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        settings[key.strip()] = yaml.safe_load(value)
    return name, settings


def run_sampler(
    study: Path,
    spec: str,
    seed: int,
    budgets: Sequence[int],
    grid_ctx: EvalContext,
    by_key: dict[str, TrialResult],
    reference: dict[str, Any],
    requests: Sequence[Any],
    wname: str,
    capacity: int,
) -> RunOutcome:
    """Run the study driver with one sampler up to the largest budget, answering from the cache.

    Returns:
        The hypervolume after each budget (the final one if the driver stopped earlier).
    """
    name, settings = parse_sampler(spec)
    directions = grid_ctx.problem.directions
    feasible: list[tuple[float, ...]] = []
    hv_at: dict[int, float] = {}
    wanted = set(budgets)

    def on_result(r: TrialResult) -> None:
        if r.feasible:
            feasible.append(r.values)

    def progress(state: RunState) -> None:
        # The evaluator returns one result per wait() and the driver records it before this
        # callback; configs recorded without simulating (over budget) are infeasible.
        if state.n_trials in wanted and state.n_trials not in hv_at:
            hv_at[state.n_trials] = hypervolume(directions, reference, feasible)

    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        storage = str(Path(tmp) / "study.journal")
        overrides = {
            "name": f"bench-{name}-{seed}",
            "seed": seed,
            "optimizer": {"name": name, **settings},
            "storage": storage,
            "budget.max_trials": max(budgets),
        }
        sf = load_study_file(study, overrides)
        holder: list[CachedEvaluator] = []

        def factory(ctx: EvalContext, _requests: Sequence[Any]) -> CachedEvaluator:
            holder.append(CachedEvaluator(ctx, by_key, capacity, on_result))
            return holder[0]

        t0 = time.perf_counter()
        state = run_study(
            sf,
            requests,
            warmup_requests=grid_ctx.warmup_requests,
            workload_name=wname,
            evaluator=factory,
            progress=progress,
        )
        wall = time.perf_counter() - t0
        trials = StudyRecord(open_storage(storage), sf.name).trials()
        off = [dict(t.params) for t in trials if params_key(dict(t.params)) not in by_key]
    final = hypervolume(directions, reference, feasible)
    for b in budgets:
        hv_at.setdefault(b, final)  # the driver stopped before b (converged / exhausted)
    off_grid = (holder[0].off_grid if holder else []) + off
    return RunOutcome(hv_at, state.n_trials, state.n_duplicates, state.status, off_grid, wall)


# -- main -------------------------------------------------------------------------------------


def _fmt(xs: Sequence[float]) -> str:
    return f"{statistics.fmean(xs):6.1%} ({min(xs):.1%}..{max(xs):.1%})"


def grid_order_hv(
    grid: Sequence[TrialResult], directions: Sequence[str], ref: dict[str, Any], n: int
) -> float:
    """Hypervolume of the grid optimizer after ``n`` trials (the space's fixed order)."""
    return hypervolume(directions, ref, [r.values for r in grid[:n] if r.feasible])


def _quiet_optuna() -> None:
    """Drop GPSampler's per-trial warning about the conditional knob (once per trial)."""
    import logging

    import optuna

    optuna.logging.get_logger("optuna")  # creates optuna's handler
    for handler in logging.getLogger("optuna").handlers:
        handler.addFilter(lambda rec: "sampled independently" not in rec.getMessage())


def main() -> None:
    """Evaluate or load the grid, run every sampler and seed, print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--study", type=Path, default=DEFAULT_STUDY, help="benchmark study file")
    ap.add_argument("--samplers", nargs="+", default=list(DEFAULT_SAMPLERS),
                    help="NAME or NAME:KEY=VALUE,... (settings of search.optimizers)")  # fmt: skip
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="sampler seeds")
    ap.add_argument("--budgets", nargs="+", type=float, default=list(DEFAULT_BUDGETS),
                    help="fractions of the grid size, in trials")  # fmt: skip
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE_DIR,
                    help="grid cache file (.json) or directory")  # fmt: skip
    ap.add_argument("--num-cpus", type=int, default=2, help="Ray CPUs for the grid pass")
    ap.add_argument("--capacity", type=int, default=2,
                    help="concurrent evaluations the driver fills (Ray CPUs)")  # fmt: skip
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    args = ap.parse_args()

    t_start = time.perf_counter()
    _quiet_optuna()
    sf = load_study_file(args.study)
    requests, warmup, wname = load_workload(sf.workload, sf.load)
    grid, meta = load_or_build_grid(sf, requests, warmup, wname, args.cache, args.num_cpus)
    problem = sf.problem
    directions = problem.directions
    size = len(grid)
    budgets = [max(1, round(f * size)) for f in args.budgets]
    ref = fixed_reference(directions, grid)
    grid_hv = hypervolume(directions, ref, [r.values for r in grid if r.feasible])
    front = HypervolumeTracker(directions)
    front.add([r.values for r in grid if r.feasible])
    grid_ctx = EvalContext(
        problem=problem, workload_id=meta["workload_id"], seed=sf.seed, warmup_requests=warmup
    )
    by_key = {params_key(r.params): r for r in grid}

    print(
        f"study: {args.study.relative_to(ROOT) if args.study.is_relative_to(ROOT) else args.study}"
    )
    print(f"space: {size} grid points, {meta['simulated']} simulated, {meta['feasible']} feasible "
          f"(SLO met); front: {len(front.front)} points")  # fmt: skip
    print(f"workload: {meta['requests']} requests ({sf.data['workload']}); one simulation "
          f"{meta['sim_mean_s'] * 1e3:.0f} ms mean, {meta['sim_p50_s'] * 1e3:.0f} ms p50, "
          f"{meta['sim_max_s'] * 1e3:.0f} ms max; grid pass {meta['wall_s']:.1f} s "
          f"on {meta['num_cpus']} CPUs (Ray)")  # fmt: skip
    bounds = ", ".join(f"[{lo:.1f}, {hi:.1f}]" for lo, hi in ref["bounds"])
    print(f"objectives: {[o.metric for o in problem.objectives]}, bounds {bounds}, ref 1.1")
    print(f"grid hypervolume: {grid_hv:.4f}")
    print(f"budgets (trials): {budgets} = {[f'{f:g}' for f in args.budgets]} of {size}; "
          f"driver capacity {args.capacity}; sampler seeds {args.seeds}\n")  # fmt: skip

    rows: dict[str, dict[int, list[float]]] = {}
    raw: dict[str, Any] = {"grid_hv": grid_hv, "budgets": budgets, "meta": meta, "runs": {}}
    bugs: list[str] = []
    for spec in args.samplers:
        name, _ = parse_sampler(spec)
        if name == "gp" and importlib.util.find_spec("torch") is None:
            print(f"{spec}: skipped: torch not installed")
            continue
        for seed in args.seeds:
            out = run_sampler(
                args.study, spec, seed, budgets, grid_ctx, by_key, ref, requests, wname,
                args.capacity,
            )  # fmt: skip
            fr = {b: out.hv[b] / grid_hv for b in budgets}
            for b in budgets:
                rows.setdefault(spec, {}).setdefault(b, []).append(fr[b])
            raw["runs"][f"{spec}/{seed}"] = {**asdict(out), "fraction": fr}
            fracs = " ".join(f"{fr[b]:.3f}" for b in budgets)
            print(f"  {spec:<32} seed {seed}: {fracs}  trials {out.trials} dup {out.duplicates} "
                  f"{out.status} {out.wall_s:.1f} s", flush=True)  # fmt: skip
            if out.off_grid:
                bugs.append(f"{spec} seed {seed}: {len(out.off_grid)} off-grid, {out.off_grid[0]}")

    header = f"{'sampler':<34}" + "".join(
        f"{f'{f:g} ({b})':>26}" for f, b in zip(args.budgets, budgets, strict=True)
    )
    print("\nHV fraction of the grid's, mean (min..max) over seeds", args.seeds)
    print(header)
    for spec, by_b in rows.items():
        print(f"{spec:<34}" + "".join(f"{_fmt(by_b[b]):>26}" for b in budgets))
    in_order = [grid_order_hv(grid, directions, ref, b) / grid_hv for b in budgets]
    print(f"{'grid (space order)':<34}" + "".join(f"{x:>26.1%}" for x in in_order))

    target_b = max(1, round(TARGET_BUDGET * size))
    at = [b for b in budgets if b <= target_b]
    if at and rows:
        b5 = max(at)
        best = max(rows, key=lambda s: statistics.fmean(rows[s][b5]))
        mean = statistics.fmean(rows[best][b5])
        print(f"\ntarget: >= {HV_TARGET:.0%} of the grid's HV within {b5} trials "
              f"(<= {TARGET_BUDGET:.0%}): best {best} {mean:.1%} mean, "
              f"{min(rows[best][b5]):.1%} worst seed -> "
              f"{'MET' if mean >= HV_TARGET else 'MISSED'}")  # fmt: skip
        rand = [s for s in rows if parse_sampler(s)[0] == "random"]
        if rand:
            r = statistics.fmean(rows[rand[0]][b5])
            for s in rows:
                if s in rand:
                    continue
                m = statistics.fmean(rows[s][b5])
                print(f"  {s:<32} vs random at {b5} trials: {m:.1%} vs {r:.1%} "
                      f"-> {'better' if m > r else 'NOT better'}")  # fmt: skip
    print("\noff-grid proposals (bugs): " + ("; ".join(bugs) if bugs else "none"))
    print(f"total wall time: {time.perf_counter() - t_start:.1f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(raw, indent=1, default=str))
    if not math.isfinite(grid_hv):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
