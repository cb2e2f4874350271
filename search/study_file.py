"""Study files (``experiments/*.yaml``): what to tune, against what, how long, stored where.

Example::

    name: quickstart
    model: llama-3.1-8b
    gpu: h200
    gpu_budget: 8                     # workers = gpu_budget // tp unless `workers` is a knob
    deployment: {timing: aic, slo: {ttft_ms: 2000, itl_ms: 50}}   # fixed DeploymentConfig fields
    workload: {trace: ../../shared/data/traces/mooncake/conversation_trace.jsonl,
               max_requests: 300, speedup: 1.0}   # or {file: workload.yaml} (synthetic spec)
    space: ../spaces/llama8b_h200.yaml            # or an inline {knobs: ...} mapping
    objectives:                       # default: the two below
      - {metric: output_token_throughput_per_gpu, direction: maximize}
      - {metric: output_token_throughput_per_user, direction: maximize}
    constraints: ["time_to_first_token.p90 <= 2000"]
    slo_margin: p90                   # optional: latency constraints tightened by the calibration
                                      # profile's p90 error (2000 -> 2000 / exp(1.28 sigma_ttft))
    optimizer: {name: optuna-nsga2, population: 8}
    budget: {max_trials: 40, max_wall_s: 900, tol: 0.001, patience: 3}
    executor: {kind: ray, address: null, num_cpus: 2}   # kind: ray | local
    storage: runs/dynosim.journal     # journal file, sqlite:///..., or any SQLAlchemy URL
    seed: 0

Input paths (``space``, ``workload.trace``, ``workload.file``, ``deployment.calibration``) are
relative to the study file;
they are stored resolved, with the space inlined, so a resume needs only the storage. The
storage path is relative to the working directory. ``simulator: module:function`` replaces
``dynosim.simulate`` (a testing hook).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, DynosimError
from dynosim.files import parse_yaml, read_text
from dynosim.workload.limits import MAX_REQUESTS, REQUESTS_WHY, finite_number
from search.load import LEVEL_KNOB, LoadAxis, LoadSpec, load_axis
from search.optimizers import check_optimizer
from search.problem import Constraint, Objective, Problem, metric_name, nested_names
from search.space import Knob, Params, Space, unreadable, yaml_error

DEFAULT_STORAGE = "runs/dynosim.journal"
DEFAULT_OBJECTIVES = (
    {"metric": "output_token_throughput_per_gpu", "direction": "maximize"},
    {"metric": "output_token_throughput_per_user", "direction": "maximize"},
)
_TOP = {
    "name", "description", "model", "gpu", "gpu_budget", "deployment", "workload", "space",
    "objectives", "constraints", "optimizer", "budget", "executor", "storage", "seed",
    "simulator", "load", "slo_margin",
}  # fmt: skip
_BUDGET = {"max_trials", "max_wall_s", "tol", "patience", "generation", "trial_timeout_s"}
_EXECUTOR = {"kind", "address", "num_cpus", "max_retries", "memory_limit_mb"}
_WORKLOAD = {"trace", "file", "speedup", "max_requests", "warmup_requests"}
MAX_GPU_BUDGET = 1_000_000
MAX_SEED = 2**32 - 1
"""Largest seed (NumPy's legacy seeding, which some samplers use, takes 32 bits)."""
DRY_BUILD_SAMPLES = 200
"""Random points of the space built (not simulated) before a study starts."""
DRY_BUILD_GRID = 1000
"""Grids up to this size are also built whole before a study starts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """When to stop: trials, wall time, or a hypervolume plateau; how long one trial may run.

    Attributes:
        max_trials: Trials in the study (stored trials count).
        max_wall_s: Wall time of one driver run (``None``: no limit).
        tol: Hypervolume improvement below which a generation counts as a plateau.
        patience: Plateau generations before the study stops.
        generation: Trials per generation (``None``: the optimizer's population).
        trial_timeout_s: Wall time one evaluation may take; a longer one is cancelled and
            recorded as an infeasible trial with the reason.
    """

    max_trials: int = 100
    max_wall_s: float | None = None
    tol: float = 1e-3
    patience: int = 3
    generation: int | None = None
    trial_timeout_s: float = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyFile:
    """A validated study file. ``data`` is the stored form (paths resolved, space inlined)."""

    name: str
    problem: Problem
    workload: dict[str, Any]
    optimizer: str
    optimizer_settings: dict[str, Any]
    budget: Budget
    executor: dict[str, Any]
    storage: str
    seed: int
    simulator: str | None
    bounds: tuple[tuple[float, float] | None, ...]
    data: dict[str, Any] = field(repr=False)
    load: LoadSpec = field(default_factory=LoadSpec)
    axis: LoadAxis | None = None


def load_study_file(path: str | Path, overrides: Mapping[str, Any] | None = None) -> StudyFile:
    """Read a study file, apply CLI overrides (dotted keys), validate.

    The file's own values are validated first (an override fills only what the file lacks), so
    that a flag never hides a bad value in the file; then the file with every override.

    Raises:
        ConfigError: One line naming the file and the field.
        DynosimError: No configuration of the space can run (see :func:`check_runnable`).
    """
    p = Path(path)
    try:
        data = parse_yaml(read_text(p, unreadable("study")))
    except yaml.YAMLError as exc:
        raise ConfigError(str(p), "YAML", f"valid YAML ({yaml_error(exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(str(p), data, "a mapping of study fields")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    missing = {k: v for k, v in given.items() if not _has(data, k)}
    base_dir = p.resolve().parent
    if len(missing) < len(given):  # some flag replaces a value of the file: check that value
        parse_study(apply_overrides(data, missing), source=str(p), base_dir=base_dir, dry=False)
    return parse_study(apply_overrides(data, given), source=str(p), base_dir=base_dir)


def _has(data: Mapping[str, Any], dotted: str) -> bool:
    """Whether the study mapping sets the dotted key (``budget.max_trials``)."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def apply_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` with ``{"budget.max_trials": 10, ...}`` set (``None`` = not given)."""
    out = copy.deepcopy(dict(data))
    for key, value in overrides.items():
        if value is None:
            continue
        node = out
        *heads, last = key.split(".")
        for h in heads:
            if not isinstance(node.get(h), dict):
                node[h] = {}
            node = node[h]
        node[last] = value
    return out


def _check_deployment_names(at: str, deployment: Mapping[str, Any]) -> None:
    """Reject misspelt deployment fields now, not as one infeasible trial after another.

    Only names are checked: a value may be valid only together with a knob's value.
    """
    top = sorted(f.name for f in fields(DeploymentConfig))
    for key, value in deployment.items():
        if key not in top:
            raise ConfigError(f"{at}deployment.{key}", value, "one of " + ", ".join(top))
        if key in ("model", "gpu"):
            why = f"the study's own {key}: field (not deployment.{key})"
            raise ConfigError(f"{at}deployment.{key}", value, why)
        sub = nested_names(key)
        if sub and not isinstance(value, Mapping):
            raise ConfigError(f"{at}deployment.{key}", value, "a mapping of " + ", ".join(sub))
        if sub and isinstance(value, Mapping):
            for k in value:
                if k not in sub:
                    raise ConfigError(f"{at}deployment.{key}.{k}", value[k], ", ".join(sub))


def _check_fixed_or_knob(at: str, fixed: Mapping[str, Any], space: Space) -> None:
    """Refuse a deployment field that is both fixed and a knob (the knob would silently win)."""
    missing = object()
    for name in space.names:
        value: Any = fixed
        for part in name.split("."):  # a path of any depth: prefill.engine.max_num_seqs
            value = value.get(part, missing) if isinstance(value, Mapping) else missing
        if value is missing:
            continue
        head = name.partition(".")[0]
        where = f"{head}:" if head in ("model", "gpu") else f"deployment.{name}"
        why = f"either a fixed field ({where} {value!r}) or a knob, not both"
        raise ConfigError(f"{at}space.knobs.{name}", name, why)


def parse_study(
    raw: Mapping[str, Any], source: str = "", base_dir: Path | None = None, *, dry: bool = True
) -> StudyFile:
    """Validate the study mapping (from YAML, or as stored in a study's user attrs).

    Args:
        raw: The study mapping.
        source: The file (or stored study) it came from, to prefix messages with.
        base_dir: The folder relative paths are resolved against (default: the working one).
        dry: Also check that some configuration of the space can run (:func:`check_runnable`).

    Raises:
        ConfigError: One line naming the file and the field.
        DynosimError: No configuration of the space can run.
    """
    at = f"{source}: " if source else ""
    base = base_dir or Path.cwd()
    _no_unknown(at, "", raw, _TOP)
    data = copy.deepcopy(dict(raw))
    name = _str(at, data, "name")
    deployment = _map(at, data, "deployment")
    _check_deployment_names(at, deployment)
    if isinstance(deployment.get("calibration"), str) and deployment["calibration"]:
        deployment["calibration"] = _resolve(
            base, deployment["calibration"], f"{at}deployment.calibration"
        )
    fixed = {**deployment, "model": _str(at, data, "model"), "gpu": _str(at, data, "gpu")}
    gpu_budget = data.get("gpu_budget")
    if gpu_budget is not None and (
        isinstance(gpu_budget, bool)
        or not isinstance(gpu_budget, int)
        or not 1 <= gpu_budget <= MAX_GPU_BUDGET
    ):
        raise ConfigError(f"{at}gpu_budget", gpu_budget, f"an integer in [1, {MAX_GPU_BUDGET:,}]")
    space_raw = data.get("space")
    if isinstance(space_raw, str):
        space_path = _resolve(base, space_raw, f"{at}space")
        space = Space.from_yaml(space_path)
        data["space"] = parse_yaml(read_text(space_path, unreadable("space")))
        data["space_file"] = space_path
    else:
        space = Space.from_dict(space_raw, f"{source}: space" if source else "space")
    _check_fixed_or_knob(at, fixed, space)
    objectives, bounds = _objectives(at, data)
    cons = data.get("constraints") or []
    if not isinstance(cons, list):
        raise ConfigError(f"{at}constraints", cons, "a list of 'METRIC <= NUMBER'")
    constraints = tuple(Constraint.parse(c, f"{at}constraints[{i}]") for i, c in enumerate(cons))
    if data.get("slo_margin") is not None:
        constraints = _with_margin(at, data["slo_margin"], constraints, fixed, space)
    try:
        problem = Problem(
            space=space, objectives=objectives, constraints=constraints, base=fixed,
            gpu_budget=gpu_budget,
        )  # fmt: skip
    except ConfigError as exc:
        raise ConfigError(f"{at}{exc.field}", exc.value, exc.allowed) from None
    optimizer = dict(_map(at, data, "optimizer") or {"name": "optuna-nsga2"})
    opt_name = optimizer.pop("name", "optuna-nsga2")
    check_optimizer(opt_name, optimizer, f"{at}optimizer")
    workload = _workload(at, data, base)
    data["workload"] = workload
    load, axis = _load(at, data, workload, problem)
    if load.mode == "sweep":
        level = Knob(name=LEVEL_KNOB, kind="choice", values=load.levels)
        space = Space(knobs=(*space.knobs, level), description=space.description)
        problem = dataclasses.replace(problem, space=space)
    seed = _int(at, data, "seed", 0)
    if seed > MAX_SEED:
        raise ConfigError(f"{at}seed", seed, f"an integer in [0, {MAX_SEED}]")
    simulator = data.get("simulator")
    if simulator is not None and not (isinstance(simulator, str) and ":" in simulator):
        raise ConfigError(f"{at}simulator", simulator, "module:function")
    storage = data.get("storage")
    if storage is not None and not isinstance(storage, str):
        raise ConfigError(f"{at}storage", storage, "a journal file path or a storage URL")
    if dry:
        check_runnable(problem, at, catalog=simulator is None)
    return StudyFile(
        name=name,
        problem=problem,
        workload=workload,
        optimizer=str(opt_name),
        optimizer_settings=optimizer,
        budget=_budget(at, data),
        executor=_executor(at, data),
        storage=str(data.get("storage") or DEFAULT_STORAGE),
        seed=seed,
        simulator=simulator,
        bounds=bounds,
        data=data,
        load=load,
        axis=axis,
    )


def _load(
    at: str, data: dict[str, Any], workload: Mapping[str, Any], problem: Problem
) -> tuple[LoadSpec, LoadAxis | None]:
    """Validate ``load:``; store it with its axis (``speedup | rate_rps | concurrency``)."""
    raw = data.get("load")
    stored = {}  # as stored with the study: the axis it was judged on
    if isinstance(raw, Mapping):
        stored = {k: raw[k] for k in ("axis", "base") if k in raw}
        raw = {k: v for k, v in raw.items() if k not in stored}
    load = LoadSpec.from_dict(raw, f"{at}load")
    axis: LoadAxis | None = None
    try:
        axis = load_axis(workload)
    except DynosimError as exc:
        if load.mode != "fixed":  # a fixed load needs no axis: loading the workload reports it
            where = f"{at}workload"
            raise ConfigError(where, workload.get("file"), f"a valid workload ({exc})") from None
    if "axis" in stored and (axis is None or stored["axis"] != axis.kind):
        found = axis.kind if axis is not None else "none"
        raise ConfigError(f"{at}load.axis", stored["axis"], f"the workload's axis ({found})")
    if LEVEL_KNOB in problem.space.names:
        why = "a deployment field (the load level is a sweep's, from load.levels)"
        raise ConfigError(f"{at}space.knobs.{LEVEL_KNOB}", LEVEL_KNOB, why)
    if load.mode != "capacity":
        named = [o.metric for o in problem.objectives] + [c.metric for c in problem.constraints]
        for metric in named:
            if metric.startswith("capacity_"):
                raise ConfigError(f"{at}load.mode", load.mode, f"capacity (for {metric})")
    if axis is not None and axis.kind == "concurrency":
        for i, v in enumerate(load.levels):
            if v != int(v):
                raise ConfigError(f"{at}load.levels[{i}]", v, "a whole number of clients")
    data["load"] = load.to_dict()
    if axis is not None:
        data["load"].update(axis=axis.kind, base=axis.base)
    return load, axis


def _with_margin(
    at: str,
    raw: object,
    constraints: tuple[Constraint, ...],
    fixed: Mapping[str, Any],
    space: Space,
) -> tuple[Constraint, ...]:
    """``slo_margin: p90``: latency constraints tightened by the calibration's p90 error.

    The spread is the deployment's calibration profile's (or the shipped one's) for the
    fixed backend, or the largest over the backends a ``backend`` knob offers; see
    :func:`dynosim.perf.calibration.with_margin`.
    """
    from dynosim.perf.calibration import load_profile, metric_error_kind, parse_quantile
    from dynosim.perf.calibration import with_margin as tighten

    q = parse_quantile(raw, f"{at}slo_margin")
    path = fixed.get("calibration")
    try:
        profile = load_profile(path if isinstance(path, str) else None)
    except ConfigError as exc:
        raise ConfigError(f"{at}deployment.{exc.field}", exc.value, exc.allowed) from None
    knob = next((k for k in space.knobs if k.name == "backend"), None)
    backends = [str(v) for v in knob.values] if knob is not None else [
        str(fixed.get("backend", "vllm"))
    ]  # fmt: skip
    out = []
    for c in constraints:
        kind = metric_error_kind(c.metric)
        sigma = max(profile.sigma(b, kind) for b in backends) if kind else 0.0
        out.append(dataclasses.replace(c, value=tighten(c.metric, c.op, c.value, sigma, q)))
    return tuple(out)


def _no_unknown(at: str, prefix: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    for key in data:
        if key not in allowed and key != "space_file":
            raise ConfigError(f"{at}{prefix}{key}", data[key], " | ".join(sorted(allowed)))


def _str(at: str, data: Mapping[str, Any], key: str) -> str:
    v = data.get(key)
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{at}{key}", v, "a non-empty string")
    return v


def _map(at: str, data: Mapping[str, Any], key: str) -> dict[str, Any]:
    v = data.get(key) or {}
    if not isinstance(v, dict):
        raise ConfigError(f"{at}{key}", v, "a mapping")
    return v


def _int(at: str, data: Mapping[str, Any], key: str, default: int, low: int = 0) -> int:
    v = data.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ConfigError(f"{at}{key}", v, f"an integer >= {low}")
    return v


def _resolve(base: Path, raw: str, where: str) -> str:
    try:
        p = Path(raw).expanduser()
        return str(p if p.is_absolute() else (base / p).resolve())
    except (RuntimeError, ValueError, OSError) as exc:  # ~nobody/, a NUL byte, a loop
        raise ConfigError(where, raw, f"a file path ({exc})") from None


def _objectives(
    at: str, data: dict[str, Any]
) -> tuple[tuple[Objective, ...], tuple[tuple[float, float] | None, ...]]:
    raw = data.get("objectives")
    if raw is None:
        raw = [dict(o) for o in DEFAULT_OBJECTIVES]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{at}objectives", raw, "a non-empty list of {metric, direction}")
    out: list[Objective] = []
    bounds: list[tuple[float, float] | None] = []
    for i, o in enumerate(raw):
        where = f"{at}objectives[{i}]"
        if not isinstance(o, dict):
            raise ConfigError(where, o, "a mapping {metric, direction}")
        _no_unknown(where, ".", o, {"metric", "direction", "penalty", "bounds"})
        direction = o.get("direction", "maximize")
        if direction not in ("maximize", "minimize"):
            raise ConfigError(f"{where}.direction", direction, "maximize | minimize")
        penalty = o.get("penalty")
        finite = isinstance(penalty, int | float) and math.isfinite(penalty)
        if penalty is not None and not finite:
            raise ConfigError(f"{where}.penalty", penalty, "a finite number")
        b = o.get("bounds")
        if b is not None and not (
            isinstance(b, list) and len(b) == 2 and all(finite_number(x) for x in b)
            and b[0] < b[1]
        ):  # fmt: skip
            raise ConfigError(f"{where}.bounds", b, "[low, high] with finite low < high")
        metric = metric_name(o.get("metric"), f"{where}.metric")
        if any(metric == earlier.metric for earlier in out):
            raise ConfigError(f"{where}.metric", metric, "a metric no other objective names")
        out.append(Objective(metric, direction, None if penalty is None else float(penalty)))
        bounds.append(None if b is None else (float(b[0]), float(b[1])))
    data["objectives"] = raw
    return tuple(out), tuple(bounds)


def _workload(at: str, data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    w = dict(_map(at, data, "workload"))
    _no_unknown(at, "workload.", w, _WORKLOAD)
    if ("trace" in w) == ("file" in w):
        raise ConfigError(f"{at}workload", w, "exactly one of trace: PATH or file: PATH")
    key = "trace" if "trace" in w else "file"
    if not isinstance(w[key], str) or not w[key]:
        raise ConfigError(f"{at}workload.{key}", w[key], "a path")
    w[key] = _resolve(base, w[key], f"{at}workload.{key}")
    speedup = w.get("speedup", 1.0)
    if not finite_number(speedup) or speedup <= 0:
        raise ConfigError(f"{at}workload.speedup", speedup, "a finite number > 0")
    for k in ("max_requests", "warmup_requests"):
        if k in w and w[k] is not None:
            n = _int(f"{at}workload.", w, k, 0, low=1 if k == "max_requests" else 0)
            if n > MAX_REQUESTS:
                raise ConfigError(f"{at}workload.{k}", n, REQUESTS_WHY)
    return w


def _budget(at: str, data: Mapping[str, Any]) -> Budget:
    b = _map(at, data, "budget")
    _no_unknown(at, "budget.", b, _BUDGET)
    wall = b.get("max_wall_s")
    bad = isinstance(wall, bool) or not isinstance(wall, int | float) or not 0 < wall < math.inf
    if wall is not None and bad:
        raise ConfigError(f"{at}budget.max_wall_s", wall, "a positive number of seconds")
    tol = b.get("tol", 1e-3)
    if isinstance(tol, bool) or not isinstance(tol, int | float) or not 0 <= tol < math.inf:
        raise ConfigError(f"{at}budget.tol", tol, "a finite number >= 0")
    gen = b.get("generation")
    timeout = b.get("trial_timeout_s", 3600.0)
    bad = isinstance(timeout, bool) or not isinstance(timeout, int | float)
    if bad or not 0 < timeout < math.inf:
        raise ConfigError(f"{at}budget.trial_timeout_s", timeout, "a finite number of seconds > 0")
    return Budget(
        max_trials=_int(f"{at}budget.", b, "max_trials", 100, low=1),
        max_wall_s=None if wall is None else float(wall),
        tol=float(tol),
        patience=_int(f"{at}budget.", b, "patience", 3, low=1),
        generation=None if gen is None else _int(f"{at}budget.", b, "generation", 1, low=1),
        trial_timeout_s=float(timeout),
    )


def _executor(at: str, data: Mapping[str, Any]) -> dict[str, Any]:
    e = {"kind": "ray", "address": None, "num_cpus": None, "max_retries": 3,
         "memory_limit_mb": None}  # fmt: skip
    e.update(_map(at, data, "executor"))
    _no_unknown(at, "executor.", e, _EXECUTOR)
    if e["kind"] not in ("ray", "local"):
        raise ConfigError(f"{at}executor.kind", e["kind"], "ray | local")
    if e["address"] == "local":  # a fresh local runtime: how a resume drops a stored address
        e["address"] = None
    if e["address"] is not None and not _ray_address(e["address"]):
        allowed = "auto | HOST:PORT of a Ray head node (e.g. 127.0.0.1:6379) | local"
        raise ConfigError(f"{at}executor.address", e["address"], allowed)
    if e["num_cpus"] is not None:
        _int(f"{at}executor.", e, "num_cpus", 1, low=1)
    _int(f"{at}executor.", e, "max_retries", 3)
    if e["memory_limit_mb"] is not None:
        _int(f"{at}executor.", e, "memory_limit_mb", 1, low=1)
    return e


def _ray_address(value: object) -> bool:
    """``auto``, ``HOST:PORT`` or ``ray://HOST:PORT`` (port 1-65535)."""
    if not isinstance(value, str):
        return False
    if value == "auto":
        return True
    host, sep, port = value.removeprefix("ray://").rpartition(":")
    return bool(sep and host.strip("[]") and port.isdigit() and 0 < int(port) < 65536)


def check_runnable(problem: Problem, at: str = "", *, catalog: bool = True) -> None:
    """Refuse a study none of whose configurations can run, before its first trial.

    Builds (never simulates) up to ``DRY_BUILD_SAMPLES`` random points of the space, and the
    whole grid when it has at most ``DRY_BUILD_GRID`` points: each is merged into the fixed
    fields and validated (:meth:`Problem.to_config`), and, with ``catalog`` (the study runs the
    real simulator), checked as the simulator checks it before running: the model and GPU are
    in the catalog, TP divides the heads, the weights fit, and AIConfigurator has data for it
    when ``timing: aic``. Stops at the first point that passes.

    Raises:
        DynosimError: No point passes; the message gives the reasons seen, most frequent first.
    """
    import numpy as np

    space = problem.space
    rng = np.random.default_rng(0)
    points: list[Params] = [space.sample(rng) for _ in range(DRY_BUILD_SAMPLES)]
    bound = space.grid_bound()
    if bound is not None and bound <= DRY_BUILD_GRID:
        points.extend(space.grid())
    reasons: dict[str, int] = {}
    known: dict[tuple[str, ...], str | None] = {}  # catalog verdicts, by what they depend on
    for params in points:
        try:
            config = problem.to_config(params)
        except DynosimError as exc:
            why = str(exc).removeprefix("invalid config: ")
        else:
            verdict = _catalog_verdict(config, known) if catalog else None
            if verdict is None:
                return
            why = verdict
        reasons[why] = reasons.get(why, 0) + 1
    seen = sorted(reasons.items(), key=lambda kv: -kv[1])
    listed = "; ".join(f"{why} ({n}x)" for why, n in seen[:3])
    more = f"; and {len(seen) - 3} other reasons" if len(seen) > 3 else ""
    raise DynosimError(
        f"{at}space: none of {len(points)} configurations built from the space can run "
        f"(checked before any simulation): {listed}{more}"
    )


def _catalog_verdict(
    config: DeploymentConfig, known: dict[tuple[str, ...], str | None]
) -> str | None:
    """Why the simulator would refuse ``config`` before running it, or None if it would not."""
    from dynosim.perf.memory import check_feasible

    try:
        check_feasible(config)
    except DynosimError as exc:
        return str(exc)
    if config.timing != "aic":
        return None
    key = (config.model, config.gpu, config.backend, config.dtype)
    if key not in known:
        from dynosim.perf.aic import resolve_key

        try:
            resolve_key(config)
            known[key] = None
        except DynosimError as exc:
            known[key] = str(exc)
    return known[key]
