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
    constraints: ["time_to_first_token.p99 <= 3000"]   # + every declared SLO (search.study.slo)
    slo_margin: p90                   # optional: latency constraints tightened by the calibration
                                      # profile's p90 error (2000 -> 2000 / exp(1.28 sigma_ttft))
    optimizer: {name: optuna-nsga2, population: 8}
    budget: {max_trials: 40, max_wall_s: 900, tol: 0.001, patience: 3}
    executor: {kind: ray, address: null, num_cpus: 2}   # kind: ray | local
    storage: runs/dynosim.journal     # journal file, sqlite:///..., or any SQLAlchemy URL
    seed: 0

Input paths (``space``, ``workload.trace``, ``workload.file``, ``deployment.calibration``) are
relative to the study file; a study-level ``slo:`` is ``deployment.slo`` given at the top;
they are stored resolved, with the space inlined, so a resume needs only the storage. The one
rule for relative paths: a path written in a study file (``storage`` included, also inside
``sqlite:///``) is relative to the study file's folder; a path given on the command line
(``--storage``) or a default (``runs/dynosim.journal``) is relative to the working directory.
``simulator: module:function`` replaces ``dynosim.simulate`` (a testing hook).
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

from dynosim.checks import MAX_SEED, choice, integer, text
from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, DynosimError
from dynosim.files import parse_yaml, read_text
from dynosim.workload.limits import finite_number
from search.study.deployment import nested_names
from search.study.dry_run import check_runnable
from search.study.load import LEVEL_KNOB, LoadAxis, LoadSpec, load_axis
from search.study.objectives import Constraint, Objective, metric_name
from search.study.problem import Problem
from search.study.sections import (
    Budget,
    ExecutorSpec,
    OptimizerSpec,
    WorkloadRef,
    mapping_field,
    no_unknown,
    parse_budget,
    parse_executor,
    parse_optimizer,
    parse_workload,
    resolve_path,
    resolve_storage,
    workload_ref,
)
from search.study.slo import (
    declared_slo,
    slo_notes,
    split_constraints,
    with_declared,
    with_margin,
)
from search.study.space import Knob, Space, unreadable, yaml_error

__all__ = ["DEFAULT_STORAGE", "Budget", "StudyFile", "apply_overrides", "check_runnable",
           "load_study_file", "parse_study"]  # fmt: skip

DEFAULT_STORAGE = "runs/dynosim.journal"
DEFAULT_OBJECTIVES = (
    {"metric": "output_token_throughput_per_gpu", "direction": "maximize"},
    {"metric": "output_token_throughput_per_user", "direction": "maximize"},
)
_TOP = {
    "name", "description", "model", "gpu", "gpu_budget", "deployment", "workload", "space",
    "objectives", "constraints", "optimizer", "budget", "executor", "storage", "seed",
    "simulator", "load", "slo_margin", "slo",
}  # fmt: skip
MAX_GPU_BUDGET = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyFile:
    """A validated study file. ``data`` is the stored form (paths resolved, space inlined)."""

    name: str
    problem: Problem
    workload: WorkloadRef
    optimizer: OptimizerSpec
    budget: Budget
    executor: ExecutorSpec
    storage: str
    seed: int
    simulator: str | None
    bounds: tuple[tuple[float, float] | None, ...]
    data: dict[str, Any] = field(repr=False)
    load: LoadSpec = field(default_factory=LoadSpec)
    axis: LoadAxis | None = None
    slo_notes: tuple[str, ...] = ()
    """Declared SLOs not enforced as declared (``search.study.slo``)."""


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
    if isinstance(given.get("storage"), str):  # a flag's path is the working directory's
        given["storage"] = resolve_storage(Path.cwd(), given["storage"], "--storage")
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
    no_unknown(at, "", raw, _TOP)
    data = copy.deepcopy(dict(raw))
    name = text(f"{at}name", data.get("name"))
    deployment = mapping_field(at, data, "deployment")
    slo = declared_slo(at, data, deployment)
    if "slo" in data:  # stored where the deployment reads it
        data["deployment"] = deployment
        del data["slo"]
    _check_deployment_names(at, deployment)
    if isinstance(deployment.get("calibration"), str) and deployment["calibration"]:
        deployment["calibration"] = resolve_path(
            base, deployment["calibration"], f"{at}deployment.calibration"
        )
    fixed = {
        **deployment,
        "model": text(f"{at}model", data.get("model")),
        "gpu": text(f"{at}gpu", data.get("gpu")),
    }
    gpu_budget = data.get("gpu_budget")
    if gpu_budget is not None:
        integer(f"{at}gpu_budget", gpu_budget, 1, MAX_GPU_BUDGET)
    space_raw = data.get("space")
    if isinstance(space_raw, str):
        space_path = resolve_path(base, space_raw, f"{at}space")
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
    _, waived = split_constraints(at, cons)
    explicit = tuple(
        Constraint.parse(c, f"{at}constraints[{i}]")
        for i, c in enumerate(cons)
        if not (isinstance(c, Mapping) and "not_enforced" in c)
    )
    constraints = with_declared(explicit, slo, waived)
    notes = tuple(slo_notes(explicit, slo, waived))
    if data.get("slo_margin") is not None:
        constraints = with_margin(at, data["slo_margin"], constraints, fixed, space)
    try:
        problem = Problem(
            space=space, objectives=objectives, constraints=constraints, base=fixed,
            gpu_budget=gpu_budget,
        )  # fmt: skip
    except ConfigError as exc:
        raise ConfigError(f"{at}{exc.field}", exc.value, exc.allowed) from None
    optimizer = parse_optimizer(at, data)
    data["workload"] = parse_workload(at, data, base)
    workload = workload_ref(data["workload"])
    load, axis = _load(at, data, workload, problem)
    budget = parse_budget(at, data)
    if load.mode == "sweep" and budget.max_trials < len(load.levels):
        raise ConfigError(
            f"{at}budget.max_trials",
            budget.max_trials,
            f"at least one trial per sweep level ({len(load.levels)} levels)",
        )
    if load.mode == "sweep":
        level = Knob(name=LEVEL_KNOB, kind="choice", values=load.levels)
        space = Space(knobs=(*space.knobs, level), description=space.description)
        problem = dataclasses.replace(problem, space=space)
    seed = integer(f"{at}seed", data.get("seed", 0), 0)
    if seed > MAX_SEED:
        raise ConfigError(f"{at}seed", seed, f"an integer in [0, {MAX_SEED}]")
    simulator = data.get("simulator")
    if simulator is not None and not (isinstance(simulator, str) and ":" in simulator):
        raise ConfigError(f"{at}simulator", simulator, "module:function")
    storage = data.get("storage")
    if storage is not None and not isinstance(storage, str):
        raise ConfigError(f"{at}storage", storage, "a journal file path or a storage URL")
    if storage and base_dir is not None:  # a path written in the study file is the file's
        data["storage"] = resolve_storage(base_dir, storage, f"{at}storage")
    if dry:
        check_runnable(problem, at, catalog=simulator is None)
    return StudyFile(
        name=name,
        problem=problem,
        workload=workload,
        optimizer=optimizer,
        budget=budget,
        executor=parse_executor(at, data),
        storage=str(data.get("storage") or DEFAULT_STORAGE),
        seed=seed,
        simulator=simulator,
        bounds=bounds,
        data=data,
        load=load,
        axis=axis,
        slo_notes=notes,
    )


def _load(
    at: str, data: dict[str, Any], workload: WorkloadRef, problem: Problem
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
            raise ConfigError(where, workload.file, f"a valid workload ({exc})") from None
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
        no_unknown(where, ".", o, {"metric", "direction", "penalty", "bounds"})
        direction = o.get("direction", "maximize")
        choice(f"{where}.direction", direction, ("maximize", "minimize"))
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
