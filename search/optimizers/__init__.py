"""Optimizers behind one ask/tell seam, and the one place their names become objects.

Names a study file may use (``optimizer.name``) and their settings (validated into an
:class:`~search.study.sections.OptimizerSpec`, where the defaults are spelt):

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

import warnings
from typing import Any

from search.optimizers.base import Optimizer
from search.study.problem import Problem
from search.study.sections import OPTIMIZERS, OptimizerSpec, check_optimizer

__all__ = ["OPTIMIZERS", "Optimizer", "build_optimizer", "check_optimizer", "generation_size"]

GENERATION = 10
"""Evaluations per generation of an optimizer without a population."""


def generation_size(spec: OptimizerSpec) -> int:
    """Evaluations per generation: the population of a genetic optimizer, else 10."""
    return spec.population if "nsga" in spec.name else GENERATION


def build_optimizer(spec: OptimizerSpec, problem: Problem, seed: int) -> Optimizer:
    """Build a seeded optimizer for ``problem`` (``spec`` is validated when it is parsed)."""
    name = spec.name
    space = problem.space
    if name == "grid":
        from search.optimizers.grid import GridOptimizer

        return GridOptimizer(space)
    if name == "random":
        from search.optimizers.random import RandomOptimizer

        return RandomOptimizer(space, seed, problem.buildable)
    n_constraints = len(problem.constraint_dicts())
    if name == "pymoo-nsga2":
        from search.optimizers.pymoo_nsga2 import PymooNSGA2

        return PymooNSGA2(
            space,
            problem.directions,
            n_constraints,
            pop_size=spec.population,
            seed=seed,
            buildable=problem.buildable,
        )
    from search.optimizers.optuna_sampler import OptunaOptimizer

    # TPE's random start-up trials become a Latin hypercube. Not GP's: on the first benchmark
    # space it made GP settle early (58% of the grid's hypervolume at 5%, against 81% from a
    # random start; experiments/2026-12-search-efficiency/NOTES.md).
    design = spec.n_startup_trials if name == "tpe" else 0
    return OptunaOptimizer(
        space,
        _sampler(spec, problem, seed),
        problem.directions,
        initial_design=design,
        seed=seed,
        buildable=problem.buildable,
    )


def _sampler(spec: OptimizerSpec, problem: Problem, seed: int) -> Any:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _new_sampler(optuna, spec, problem, seed)


def _new_sampler(optuna: Any, spec: OptimizerSpec, problem: Problem, seed: int) -> Any:
    name, pop = spec.name, spec.population
    if name == "optuna-nsga3" or (name == "optuna-nsga2" and len(problem.objectives) >= 4):
        return optuna.samplers.NSGAIIISampler(population_size=pop, seed=seed)
    if name == "optuna-nsga2":
        return optuna.samplers.NSGAIISampler(
            population_size=pop,
            crossover_prob=spec.crossover_prob,
            mutation_prob=spec.mutation_prob,
            seed=seed,
        )
    if name == "tpe":
        return optuna.samplers.TPESampler(
            n_startup_trials=spec.n_startup_trials,
            multivariate=True,
            group=True,
            constant_liar=True,
            seed=seed,
        )
    if name == "gp":
        return optuna.samplers.GPSampler(n_startup_trials=spec.n_startup_trials, seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)
