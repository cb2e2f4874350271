"""Knob values -> ``DeploymentConfig``: merging into the fixed fields, the GPU budget, paths.

A knob is a dotted path to one plain deployment field (:func:`check_path`); the fields of the
mode a trial does not run are dropped (:data:`AGG_ONLY`, :data:`DISAGG_ONLY`), as are engine
fields of another backend.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, get_args, get_type_hints

from dynosim.config import (
    BACKEND_ENGINE_FIELDS,
    PER_POOL_FIELDS,
    DeploymentConfig,
    PlannerConfig,
)
from dynosim.errors import ConfigError, DynosimError, InfeasibleError
from search.study.load import LEVEL_KNOB
from search.study.space import Params

AGG_ONLY = PER_POOL_FIELDS
"""Top-level fields that only ``mode: agg`` has (with ``mode: disagg`` each pool has its own)."""
DISAGG_ONLY = ("prefill", "decode", "max_local_prefill_tokens", "planner.prefill", "planner.decode")
"""Fields (and sections) that only ``mode: disagg`` has."""


def _drop_other_backends(out: dict[str, Any]) -> None:
    """Drop fixed engine fields of a backend other than the chosen one (top level and pools).

    A study may fix ``engine.schedule_policy: lpm`` and tune ``backend``: the field applies to
    the SGLang trials only.
    """
    backend = out.get("backend", "vllm")
    for where in (out, out.get("prefill"), out.get("decode")):
        engine = where.get("engine") if isinstance(where, dict) else None
        if not isinstance(engine, dict):
            continue
        for other, names in BACKEND_ENGINE_FIELDS.items():
            if other != backend:
                for name in names:
                    engine.pop(name, None)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@functools.cache
def _sections(cls: type) -> dict[str, type]:
    """The fields of dataclass ``cls`` that are dataclasses themselves (``X`` or ``X | None``)."""
    out: dict[str, type] = {}
    for name, hint in get_type_hints(cls).items():
        for t in (hint, *get_args(hint)):
            if isinstance(t, type) and dataclasses.is_dataclass(t):
                out[name] = t
    return out


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def check_path(name: str) -> None:
    """Check that ``name`` is a dotted path to one plain deployment field.

    ``engine.max_num_seqs``, ``prefill.engine.max_num_batched_tokens``,
    ``planner.decode.max_workers``...: every part but the last names a section.

    Raises:
        ConfigError: Naming the knob and what is allowed where the path goes wrong.
    """
    cls: type = DeploymentConfig
    parts = name.split(".")
    for i, part in enumerate(parts):
        here = ".".join(parts[: i + 1])
        prefix = here[: len(here) - len(part)]
        if part not in _names(cls):
            allowed = ", ".join(prefix + n for n in _names(cls))
            raise ConfigError(f"knobs.{name}", name, f"one of {allowed}")
        sub = _sections(cls).get(part)
        last = i == len(parts) - 1
        if last and sub is not None:
            allowed = ", ".join(f"{here}.{n}" for n in _names(sub))
            raise ConfigError(f"knobs.{name}", name, f"a field of the {here} section: {allowed}")
        if sub is None:
            if not last:
                raise ConfigError(f"knobs.{name}", name, f"{here} (a plain field, no subfields)")
            return
        cls = sub


def nested_names(path: str) -> tuple[str, ...]:
    """Field names of the deployment section at dotted ``path``; empty for a plain field.

    ``engine``, ``prefill.engine``, ``planner.decode``...; an unknown path also gives ``()``.
    """
    cls: type = DeploymentConfig
    for part in path.split("."):
        sub = _sections(cls).get(part)
        if sub is None:
            return ()
        cls = sub
    return _names(cls)


def over_budget(config: DeploymentConfig, budget: int) -> str:
    """Why ``config`` does not fit in ``budget`` GPUs: its initial GPUs or its planner's ceiling.

    ``tp*workers=16 exceeds ...``, ``prefill 2x2 + decode 4x1 = 8 GPUs exceeds ...`` (workers x
    TP), or ``planner ceiling of 12 GPUs (up to 6x2; planner.max_gpus=16) exceeds ...``.
    """
    tail = f"exceeds the GPU budget of {budget}"
    pools = config.pools()
    if config.gpus > budget or config.planner is None:
        if config.mode != "disagg":
            return f"tp*workers={config.gpus} {tail}"
        layout = " + ".join(f"{name} {p.workers}x{p.tp}" for name, p in pools)
        return f"{layout} = {config.gpus} GPUs {tail}"
    planner = config.planner
    terms = " + ".join(
        f"{'' if name == 'agg' else name + ' '}up to {planner.limits(name).max_workers}x{p.tp}"
        for name, p in pools
    )
    cap = "" if planner.max_gpus is None else f"; planner.max_gpus={planner.max_gpus}"
    return f"planner ceiling of {config.peak_gpus} GPUs ({terms}{cap}) {tail}"


_PLANNER = PlannerConfig()


def _within_planner(workers: int, planner: object) -> int:
    """``workers`` moved within a planner's worker bounds (bad bounds are left to validation)."""
    if not isinstance(planner, Mapping):
        return workers
    low = planner.get("min_workers", _PLANNER.min_workers)
    high = planner.get("max_workers", _PLANNER.max_workers)
    if _is_int(high):
        workers = min(workers, high)
    if _is_int(low):
        workers = max(workers, low)
    return workers


def _put(out: dict[str, Any], path: str, value: object) -> None:
    """Set the dotted ``path`` of ``out`` to ``value``, making the sections on the way."""
    *heads, last = path.split(".")
    node = out
    for head in heads:
        if not isinstance(node.get(head), dict):
            node[head] = {}
        node = node[head]
    node[last] = value


def _drop(out: dict[str, Any], path: str) -> None:
    """Remove the dotted ``path`` from ``out`` if it is there."""
    *heads, last = path.split(".")
    node: object = out
    for head in heads:
        node = node.get(head) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def _build(data: Mapping[str, Any]) -> DeploymentConfig:
    from dynosim.perf.overhead import with_calibration  # the profile's host cost, if any

    try:
        return with_calibration(DeploymentConfig.from_dict(data))
    except DynosimError as exc:
        raise InfeasibleError(f"invalid config: {exc}") from exc


def config_dict(base: Mapping[str, Any], gpu_budget: int | None, params: Params) -> dict[str, Any]:
    """The deployment fields before validation: base, then knobs, then derived fields.

    Base fields of the other mode are dropped, so a study may fix ``tp`` and tune ``mode``:
    with ``mode: disagg`` the top-level ``tp`` and ``workers``, with ``mode: agg`` the
    pools, ``max_local_prefill_tokens`` and the planner's pool limits (:data:`AGG_ONLY`,
    :data:`DISAGG_ONLY`). Knobs are set as they are (a knob of the wrong mode is refused
    when the problem is made). With a ``gpu_budget``:

    * agg mode without a ``workers`` knob or fixed field: workers = budget // tp, kept
      within a planner's ``min_workers``..``max_workers``;
    * a planner without ``max_gpus`` gets ``max_gpus = gpu_budget``, so it never grows the
      deployment past the study's budget.
    """
    out: dict[str, Any] = json.loads(json.dumps(dict(base)))
    mode = params.get("mode", out.get("mode", "agg"))
    for path in AGG_ONLY if mode == "disagg" else DISAGG_ONLY:
        _drop(out, path)
    for name, value in params.items():
        if name != LEVEL_KNOB:  # the load level of a sweep point is not a deployment field
            _put(out, name, value)
    _drop_other_backends(out)
    budget = gpu_budget
    if budget is None:
        return out
    planner = out.get("planner")
    if mode != "disagg" and "workers" not in params and "workers" not in base:
        tp = out.get("tp", 1)
        dp = out.get("attention_dp", 1)  # a replica has tp x attention_dp GPUs
        if _is_int(tp) and tp > 0 and _is_int(dp) and dp > 0:
            out["workers"] = _within_planner(budget // (tp * dp), planner)
    if isinstance(planner, dict) and planner.get("max_gpus") is None:
        planner["max_gpus"] = budget
    return out


def build_config(
    base: Mapping[str, Any], gpu_budget: int | None, params: Params
) -> DeploymentConfig:
    """Merge knobs into the fixed fields ``base`` and validate.

    The GPU budget bounds the deployment's :attr:`~DeploymentConfig.peak_gpus`: both pools
    of a disagg deployment, and the most a planner may grow it to.

    Raises:
        InfeasibleError: Over the GPU budget, or the config is rejected (a ``ConfigError``).
    """
    data = config_dict(base, gpu_budget, params)
    budget = gpu_budget
    if budget is not None:
        tp = data.get("tp", 1)
        if data.get("mode", "agg") != "disagg" and _is_int(tp) and tp > budget:
            raise InfeasibleError(f"tp={tp} exceeds the GPU budget of {budget}")
        dp = data.get("attention_dp", 1)
        agg = data.get("mode", "agg") != "disagg"
        if agg and _is_int(tp) and _is_int(dp) and tp * dp > budget:
            raise InfeasibleError(
                f"tp x attention_dp = {tp * dp} exceeds the GPU budget of {budget}"
            )
        if "planner" in data:  # the initial GPUs first: the budget, not planner.max_gpus
            start = _build({k: v for k, v in data.items() if k != "planner"})
            if start.gpus > budget:
                raise InfeasibleError(over_budget(start, budget))
    config = _build(data)
    if budget is not None and config.peak_gpus > budget:
        raise InfeasibleError(over_budget(config, budget))
    return config
