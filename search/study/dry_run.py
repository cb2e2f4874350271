"""Before a study starts: can any configuration of its space run at all?

Builds (never simulates) sample points of the space and, when the study runs the real
simulator, checks them as the simulator would before running (catalog, memory, AIConfigurator
data). ``dynosim.perf`` is imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynosim.errors import DynosimError
from search.study.problem import Problem
from search.study.space import Params

if TYPE_CHECKING:
    from dynosim.config import DeploymentConfig

DRY_BUILD_SAMPLES = 200
"""Random points of the space built (not simulated) before a study starts."""
DRY_BUILD_GRID = 1000
"""Grids up to this size are also built whole before a study starts."""


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
        why = _why_not(problem, params, known, catalog=catalog)
        if why is None:
            return
        reasons[why] = reasons.get(why, 0) + 1
    seen = sorted(reasons.items(), key=lambda kv: -kv[1])
    listed = "; ".join(f"{why} ({n}x)" for why, n in seen[:3])
    more = f"; and {len(seen) - 3} other reasons" if len(seen) > 3 else ""
    raise DynosimError(
        f"{at}space: none of {len(points)} configurations built from the space can run "
        f"(checked before any simulation): {listed}{more}"
    )


def _why_not(
    problem: Problem,
    params: Params,
    known: dict[tuple[str, ...], str | None],
    *,
    catalog: bool,
) -> str | None:
    """Why the point ``params`` cannot run (built, then checked as the simulator would), or None."""
    try:
        config = problem.to_config(params)
    except DynosimError as exc:
        return str(exc).removeprefix("invalid config: ")
    return _catalog_verdict(config, known) if catalog else None


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


UNRUNNABLE_SHARE = 0.8
"""A knob value is flagged when at least this share of the sampled points with it cannot run."""
MIN_VALUE_SAMPLES = 5
"""Sampled points a knob value needs before it is judged."""


def unrunnable_values(problem: Problem, *, catalog: bool = True, limit: int = 3) -> list[str]:
    """One line per knob value that makes most sampled configurations unable to run.

    The ``DRY_BUILD_SAMPLES`` random points of :func:`check_runnable` are built and checked
    the same way; for each knob value seen on at least ``MIN_VALUE_SAMPLES`` of them, the
    share that cannot run is counted. Refusals for the GPU budget are left out: the optimizers
    resample those (``search.optimizers``), so they cost no simulation. The worst ``limit``
    values are returned, e.g. ``backend=sglang: 38 of 40 sampled configurations cannot run
    (AIConfigurator has no data ...)``.
    """
    import numpy as np

    space = problem.space
    rng = np.random.default_rng(0)
    known: dict[tuple[str, ...], str | None] = {}
    seen: dict[tuple[str, str], list[str | None]] = {}
    for _ in range(DRY_BUILD_SAMPLES):
        params = space.sample(rng)
        why = _why_not(problem, params, known, catalog=catalog)
        if why is not None and "exceeds the GPU budget" in why:
            continue
        for name, value in params.items():
            seen.setdefault((name, str(value)), []).append(why)
    flagged = []
    for (name, value), whys in seen.items():
        bad = [w for w in whys if w is not None]
        if len(whys) >= MIN_VALUE_SAMPLES and len(bad) >= UNRUNNABLE_SHARE * len(whys):
            top = max(set(bad), key=bad.count)
            flagged.append((len(bad) / len(whys), len(whys), name, value, len(bad), top))
    flagged.sort(key=lambda f: (-f[0], -f[1], f[2], f[3]))
    return [
        f"{name}={value}: {n_bad} of {n} sampled configurations cannot run ({top})"
        for _, n, name, value, n_bad, top in flagged[:limit]
    ]
