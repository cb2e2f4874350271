"""Optimizers behind one ask/tell seam, and the one place their names become objects.

Names a study file may use (``optimizer.name``) and their settings:

* ``pymoo-nsga2``: pymoo NSGA-II on mixed variables; ``population`` (16).
* ``optuna-nsga2``: Optuna ``NSGAIISampler`` (``NSGAIIISampler`` for 4+ objectives);
  ``population`` (16), ``crossover_prob`` (0.9), ``mutation_prob`` (None = 1/knobs).
* ``optuna-nsga3``: Optuna ``NSGAIIISampler``; ``population`` (16).
* ``tpe``: Optuna ``TPESampler`` (multivariate, grouped, constant liar); ``n_startup_trials`` (10),
  which are a Latin hypercube of the space rather than random points.
* ``gp``: Optuna ``GPSampler``; needs torch, which is not a dependency; ``n_startup_trials`` (10).
* ``optuna-random``: Optuna ``RandomSampler``.
* ``random``: :class:`~search.optimizers.random.RandomOptimizer`.
* ``grid``: :class:`~search.optimizers.grid.GridOptimizer`, the exhaustive baseline.

Every sampler is built with the study's seed: the same seed gives the same proposals.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Mapping
from typing import Any

from dynosim.errors import ConfigError
from search.optimizers.base import Optimizer
from search.problem import Problem

__all__ = ["OPTIMIZERS", "Optimizer", "build_optimizer", "generation_size"]

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


def check_optimizer(name: object, settings: Mapping[str, Any], where: str = "optimizer") -> None:
    """Validate an optimizer name and its settings without building it.

    Raises:
        ConfigError: Unknown name or setting, or ``gp`` without torch.
    """
    if name not in OPTIMIZERS:
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


def generation_size(name: str, settings: Mapping[str, Any]) -> int:
    """Evaluations per generation: the population of a genetic optimizer, else 10."""
    return int(settings.get("population", 16)) if "nsga" in name else 10


def build_optimizer(
    name: str, settings: Mapping[str, Any], problem: Problem, seed: int
) -> Optimizer:
    """Build a seeded optimizer for ``problem``.

    Raises:
        ConfigError: Unknown name or setting.
    """
    check_optimizer(name, settings)
    space = problem.space
    if name == "grid":
        from search.optimizers.grid import GridOptimizer

        return GridOptimizer(space)
    if name == "random":
        from search.optimizers.random import RandomOptimizer

        return RandomOptimizer(space, seed)
    n_constraints = len(problem.constraint_dicts())
    if name == "pymoo-nsga2":
        from search.optimizers.pymoo_nsga2 import PymooNSGA2

        pop = int(settings.get("population", 16))
        return PymooNSGA2(
            space,
            problem.directions,
            n_constraints,
            pop_size=pop,
            seed=seed,
            buildable=problem.buildable,
        )
    from search.optimizers.optuna_sampler import OptunaOptimizer

    # TPE's random start-up trials become a Latin hypercube. Not GP's: on the first benchmark
    # space it made GP settle early (58% of the grid's hypervolume at 5%, against 81% from a
    # random start; experiments/2026-12-search-efficiency/NOTES.md).
    design = int(settings.get("n_startup_trials", 10)) if name == "tpe" else 0
    return OptunaOptimizer(
        space,
        _sampler(name, settings, problem, seed),
        problem.directions,
        initial_design=design,
        seed=seed,
    )


def _sampler(name: str, settings: Mapping[str, Any], problem: Problem, seed: int) -> Any:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _new_sampler(optuna, name, settings, problem, seed)


def _new_sampler(
    optuna: Any, name: str, settings: Mapping[str, Any], problem: Problem, seed: int
) -> Any:
    pop = int(settings.get("population", 16))
    if name == "optuna-nsga3" or (name == "optuna-nsga2" and len(problem.objectives) >= 4):
        return optuna.samplers.NSGAIIISampler(population_size=pop, seed=seed)
    if name == "optuna-nsga2":
        return optuna.samplers.NSGAIISampler(
            population_size=pop,
            crossover_prob=float(settings.get("crossover_prob", 0.9)),
            mutation_prob=settings.get("mutation_prob"),
            seed=seed,
        )
    if name == "tpe":
        return optuna.samplers.TPESampler(
            n_startup_trials=int(settings.get("n_startup_trials", 10)),
            multivariate=True,
            group=True,
            constant_liar=True,
            seed=seed,
        )
    if name == "gp":
        return optuna.samplers.GPSampler(
            n_startup_trials=int(settings.get("n_startup_trials", 10)), seed=seed
        )
    return optuna.samplers.RandomSampler(seed=seed)
