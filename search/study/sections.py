"""The study file's typed sections: budget, executor, workload, optimizer, and their parsers.

Each section is validated once, here, into a small frozen dataclass; the rest of ``search``
reads attributes, never a dict by string key. The optimizer names and the settings each
accepts (:data:`OPTIMIZERS`) live here too, so that a study is checked without building one.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dynosim.checks import choice, integer, number
from dynosim.errors import ConfigError
from dynosim.workload.limits import MAX_REQUESTS, REQUESTS_WHY, finite_number

_BUDGET = {"max_trials", "max_wall_s", "tol", "patience", "generation", "trial_timeout_s"}
_EXECUTOR = {"kind", "address", "num_cpus", "max_retries", "memory_limit_mb"}
_WORKLOAD = {"trace", "file", "speedup", "max_requests", "warmup_requests"}
OPTIMIZERS: dict[str, frozenset[str]] = {
    "pymoo-nsga2": frozenset({"population"}),
    "optuna-nsga2": frozenset({"population", "crossover_prob", "mutation_prob"}),
    "optuna-nsga3": frozenset({"population"}),
    "tpe": frozenset({"n_startup_trials"}),
    "gp": frozenset({"n_startup_trials"}),
    "optuna-random": frozenset(),
    "random": frozenset(),
    "grid": frozenset(),
}
"""Optimizer names and the settings each accepts."""
DEFAULT_OPTIMIZER = "optuna-nsga2"


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
class ExecutorSpec:
    """Where evaluations run (the ``executor:`` section).

    Attributes:
        kind: ``ray`` (tasks on a local runtime or a cluster) or ``local`` (in the driver).
        address: A Ray cluster (``auto``, ``HOST:PORT``); ``None`` starts a local runtime.
        num_cpus: CPUs of a local Ray runtime (``None``: all).
        max_retries: Times Ray re-runs a task whose worker died.
        memory_limit_mb: Memory one evaluation may allocate (``None``: no limit).
    """

    kind: Literal["ray", "local"] = "ray"
    address: str | None = None
    num_cpus: int | None = None
    max_retries: int = 3
    memory_limit_mb: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadRef:
    """The ``workload:`` section: a trace or a workload file, paths resolved.

    Attributes:
        trace: A trace file (exactly one of ``trace`` and ``file`` is set).
        file: A workload file (a synthetic spec, a benchmark client or a trace reference).
        speedup: The trace's replay speed-up (its level on the load axis).
        max_requests: The first requests only (``None``: all).
        warmup_requests: Requests left out of the metrics (``None``: the workload's own).
    """

    trace: str | None = None
    file: str | None = None
    speedup: float = 1.0
    max_requests: int | None = None
    warmup_requests: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OptimizerSpec:
    """The ``optimizer:`` section, with every setting's default spelt once.

    Attributes:
        name: One of :data:`OPTIMIZERS`.
        population: A genetic optimizer's population (and generation size).
        n_startup_trials: TPE's / GP's start-up trials.
        crossover_prob: Optuna NSGA-II's crossover probability.
        mutation_prob: Optuna NSGA-II's mutation probability (``None``: 1 / knobs).
    """

    name: str = DEFAULT_OPTIMIZER
    population: int = 16
    n_startup_trials: int = 10
    crossover_prob: float = 0.9
    mutation_prob: float | None = None


# -- shared field checks --------------------------------------------------------------------


def no_unknown(at: str, prefix: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    """Refuse a key of ``data`` not in ``allowed`` (``space_file`` is the stored space's path)."""
    for key in data:
        if key not in allowed and key != "space_file":
            raise ConfigError(f"{at}{prefix}{key}", data[key], " | ".join(sorted(allowed)))


def mapping_field(at: str, data: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` as a mapping (``{}`` when absent)."""
    v = data.get(key) or {}
    if not isinstance(v, dict):
        raise ConfigError(f"{at}{key}", v, "a mapping")
    return v


def resolve_path(base: Path, raw: str, where: str) -> str:
    """``raw`` as an absolute path, relative ones against ``base``."""
    try:
        p = Path(raw).expanduser()
        return str(p if p.is_absolute() else (base / p).resolve())
    except (RuntimeError, ValueError, OSError) as exc:  # ~nobody/, a NUL byte, a loop
        raise ConfigError(where, raw, f"a file path ({exc})") from None


def resolve_storage(base: Path, raw: str, where: str) -> str:
    """A storage as given, with a file path (plain or inside ``sqlite:///``) made absolute.

    The one rule for relative paths: a path written in a study file is relative to the study
    file's folder, a path given on the command line (or a default) to the working directory;
    ``base`` is that folder. Other URLs (``postgresql+psycopg2://...``) are returned unchanged.
    """
    prefix = "sqlite:///"
    if raw.startswith(prefix):
        path = raw[len(prefix) :]
        return prefix + resolve_path(base, path, where) if path else raw
    if "://" in raw:
        return raw
    return resolve_path(base, raw, where)


# -- the parsers ----------------------------------------------------------------------------


def parse_workload(at: str, data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """The ``workload:`` mapping validated, its path resolved (the stored form)."""
    w = dict(mapping_field(at, data, "workload"))
    no_unknown(at, "workload.", w, _WORKLOAD)
    if ("trace" in w) == ("file" in w):
        raise ConfigError(f"{at}workload", w, "exactly one of trace: PATH or file: PATH")
    key = "trace" if "trace" in w else "file"
    if not isinstance(w[key], str) or not w[key]:
        raise ConfigError(f"{at}workload.{key}", w[key], "a path")
    w[key] = resolve_path(base, w[key], f"{at}workload.{key}")
    speedup = w.get("speedup", 1.0)
    if not finite_number(speedup) or speedup <= 0:
        raise ConfigError(f"{at}workload.speedup", speedup, "a finite number > 0")
    for k in ("max_requests", "warmup_requests"):
        if k in w and w[k] is not None:
            n = integer(f"{at}workload.{k}", w.get(k, 0), 1 if k == "max_requests" else 0)
            if n > MAX_REQUESTS:
                raise ConfigError(f"{at}workload.{k}", n, REQUESTS_WHY)
    return w


def workload_ref(w: Mapping[str, Any]) -> WorkloadRef:
    """The :class:`WorkloadRef` of a validated ``workload:`` mapping."""
    return WorkloadRef(
        trace=w.get("trace"),
        file=w.get("file"),
        speedup=w.get("speedup", 1.0),
        max_requests=w.get("max_requests"),
        warmup_requests=w.get("warmup_requests"),
    )


MAX_TRIALS = 1_000_000
"""Most trials a study may ask for (a 10,000-trial study's report already takes seconds)."""


def parse_budget(at: str, data: Mapping[str, Any]) -> Budget:
    """The ``budget:`` section."""
    b = mapping_field(at, data, "budget")
    no_unknown(at, "budget.", b, _BUDGET)
    wall = b.get("max_wall_s")
    bad = isinstance(wall, bool) or not isinstance(wall, int | float) or not 0 < wall < math.inf
    if wall is not None and bad:
        raise ConfigError(f"{at}budget.max_wall_s", wall, "a positive number of seconds")
    tol = b.get("tol", 1e-3)
    number(f"{at}budget.tol", tol, 0)
    gen = b.get("generation")
    timeout = b.get("trial_timeout_s", 3600.0)
    bad = isinstance(timeout, bool) or not isinstance(timeout, int | float)
    if bad or not 0 < timeout < math.inf:
        raise ConfigError(f"{at}budget.trial_timeout_s", timeout, "a finite number of seconds > 0")
    return Budget(
        max_trials=integer(f"{at}budget.max_trials", b.get("max_trials", 100), 1, MAX_TRIALS),
        max_wall_s=None if wall is None else float(wall),
        tol=float(tol),
        patience=integer(f"{at}budget.patience", b.get("patience", 3), 1, MAX_TRIALS),
        generation=None
        if gen is None
        else integer(f"{at}budget.generation", b.get("generation", 1), 1, MAX_TRIALS),
        trial_timeout_s=float(timeout),
    )


def parse_executor(at: str, data: Mapping[str, Any]) -> ExecutorSpec:
    """The ``executor:`` section (a stored ``address: local`` means a fresh local runtime)."""
    e: dict[str, Any] = {"kind": "ray", "address": None, "num_cpus": None, "max_retries": 3,
                         "memory_limit_mb": None}  # fmt: skip
    e.update(mapping_field(at, data, "executor"))
    no_unknown(at, "executor.", e, _EXECUTOR)
    choice(f"{at}executor.kind", e["kind"], ("ray", "local"))
    if e["address"] == "local":  # a fresh local runtime: how a resume drops a stored address
        e["address"] = None
    if e["address"] is not None and not _ray_address(e["address"]):
        allowed = "auto | HOST:PORT of a Ray head node (e.g. 127.0.0.1:6379) | local"
        raise ConfigError(f"{at}executor.address", e["address"], allowed)
    if e["num_cpus"] is not None:
        integer(f"{at}executor.num_cpus", e.get("num_cpus", 1), 1)
    integer(f"{at}executor.max_retries", e.get("max_retries", 3), 0)
    if e["memory_limit_mb"] is not None:
        integer(f"{at}executor.memory_limit_mb", e.get("memory_limit_mb", 1), 1)
    return ExecutorSpec(
        kind=e["kind"],
        address=e["address"],
        num_cpus=e["num_cpus"],
        max_retries=e["max_retries"],
        memory_limit_mb=e["memory_limit_mb"],
    )


def _ray_address(value: object) -> bool:
    """``auto``, ``HOST:PORT`` or ``ray://HOST:PORT`` (port 1-65535)."""
    if not isinstance(value, str):
        return False
    if value == "auto":
        return True
    host, sep, port = value.removeprefix("ray://").rpartition(":")
    return bool(sep and host.strip("[]") and port.isdigit() and 0 < int(port) < 65536)


def parse_optimizer(at: str, data: Mapping[str, Any]) -> OptimizerSpec:
    """The ``optimizer:`` section (default: ``optuna-nsga2`` with its defaults)."""
    optimizer = dict(mapping_field(at, data, "optimizer") or {"name": DEFAULT_OPTIMIZER})
    name = optimizer.pop("name", DEFAULT_OPTIMIZER)
    return optimizer_spec(name, optimizer, f"{at}optimizer")


def optimizer_spec(
    name: object, settings: Mapping[str, Any], where: str = "optimizer"
) -> OptimizerSpec:
    """Validate an optimizer name and its settings into an :class:`OptimizerSpec`.

    Raises:
        ConfigError: Unknown name or setting, or ``gp`` without torch.
    """
    if not isinstance(name, str) or name not in OPTIMIZERS:
        raise ConfigError(f"{where}.name", name, " | ".join(OPTIMIZERS))
    for key, value in settings.items():
        if key not in OPTIMIZERS[name]:
            allowed = " | ".join(sorted(OPTIMIZERS[name])) or "no settings"
            raise ConfigError(f"{where}.{key}", value, allowed)
    pop = settings.get("population")
    if pop is not None and (isinstance(pop, bool) or not isinstance(pop, int) or pop < 2):
        raise ConfigError(f"{where}.population", pop, "an integer >= 2")
    if name == "gp" and importlib.util.find_spec("torch") is None:
        raise ConfigError(f"{where}.name", name, "an optimizer other than gp (gp needs torch)")
    default = OptimizerSpec()
    mutation = settings.get("mutation_prob")
    return OptimizerSpec(
        name=str(name),
        population=int(settings.get("population", default.population)),
        n_startup_trials=int(settings.get("n_startup_trials", default.n_startup_trials)),
        crossover_prob=float(settings.get("crossover_prob", default.crossover_prob)),
        mutation_prob=None if mutation is None else float(mutation),
    )


def check_optimizer(name: object, settings: Mapping[str, Any], where: str = "optimizer") -> None:
    """Validate an optimizer name and its settings without building it.

    Raises:
        ConfigError: Unknown name or setting, or ``gp`` without torch.
    """
    optimizer_spec(name, settings, where)
