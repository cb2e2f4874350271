"""Conformance suite: every optimizer behind the ask/tell seam."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from dynosim.errors import ConfigError
from search.optimizers import build_optimizer
from search.optimizers.base import Optimizer
from search.run.evaluate import EvalContext, evaluate_one
from search.study.problem import Problem
from search.study.sections import OPTIMIZERS, check_optimizer, optimizer_spec
from search.study.space import Params
from search.trial import TrialResult, params_key
from tests.unit.search import fakes

NAMES = [n for n in OPTIMIZERS if n != "gp" or importlib.util.find_spec("torch")]
SETTINGS = {
    "pymoo-nsga2": {"population": 6},
    "optuna-nsga2": {"population": 6},
    "optuna-nsga3": {"population": 6},
    "tpe": {"n_startup_trials": 4},
}


@pytest.fixture
def problem(tmp_path: Path) -> Problem:
    return fakes.study(tmp_path).problem  # type: ignore[no-any-return]


def evaluate(problem: Problem, params: Params) -> TrialResult:
    ctx = EvalContext(problem=problem, workload_id="w", simulate_fn=fakes.simulate)
    return evaluate_one(ctx, params, fakes.tiny_requests(3))


def drive(opt: Optimizer, problem: Problem, n: int, batch: int = 3) -> list[Params]:
    asked: list[Params] = []
    while len(asked) < n:
        proposals = opt.ask(batch)
        if not proposals:
            break
        asked += proposals
        opt.tell([evaluate(problem, p) for p in proposals])
    return asked


def make(name: str, problem: Problem, seed: int = 0) -> Optimizer:
    return build_optimizer(optimizer_spec(name, SETTINGS.get(name, {})), problem, seed)


@pytest.mark.parametrize("name", NAMES)
def test_proposals_are_valid_points(name: str, problem: Problem) -> None:
    asked = drive(make(name, problem), problem, 18)
    assert len(asked) >= 18
    for p in asked:
        problem.space.validate(p)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_proposals(name: str, problem: Problem) -> None:
    a = drive(make(name, problem, seed=7), problem, 15)
    b = drive(make(name, problem, seed=7), problem, 15)
    assert a == b


@pytest.mark.parametrize("name", [n for n in NAMES if n != "grid"])
def test_different_seed_different_proposals(name: str, problem: Problem) -> None:
    assert drive(make(name, problem, seed=1), problem, 9) != drive(
        make(name, problem, seed=2), problem, 9
    )


@pytest.mark.parametrize("name", NAMES)
def test_replay_then_continue(name: str, problem: Problem) -> None:
    first = make(name, problem)
    asked = drive(first, problem, 12)
    stored = [evaluate(problem, p) for p in asked]
    fresh = make(name, problem)
    fresh.tell(stored)
    more = drive(fresh, problem, 6)
    assert more
    for p in more:
        problem.space.validate(p)
    if name == "grid":
        assert not {params_key(p) for p in more} & {params_key(p) for p in asked}


def test_grid_exhausts_exactly_once(problem: Problem) -> None:
    asked = drive(make("grid", problem), problem, 1000, batch=7)
    assert len(asked) == 96
    assert len({params_key(p) for p in asked}) == 96


def test_pymoo_rebuilds_population_from_stored(problem: Problem) -> None:
    from search.optimizers.pymoo_nsga2 import PymooNSGA2

    asked = drive(make("pymoo-nsga2", problem), problem, 18)
    fresh = make("pymoo-nsga2", problem)
    assert isinstance(fresh, PymooNSGA2)
    fresh.tell([evaluate(problem, p) for p in asked])
    offspring = fresh.ask(100)
    assert len(offspring) == 6  # one generation of offspring, not a new random population
    assert fresh._algorithm.n_gen == 2  # the stored evaluations were generation 1


def test_optuna_nsga_replay_keeps_generations(problem: Problem) -> None:
    from search.optimizers.optuna_sampler import OptunaOptimizer

    asked = drive(make("optuna-nsga2", problem), problem, 12)
    fresh = make("optuna-nsga2", problem)
    assert isinstance(fresh, OptunaOptimizer)
    fresh.tell([evaluate(problem, p) for p in asked])
    trials = fresh.study.trials
    gens = [t.system_attrs["NSGAIISampler:generation"] for t in trials]
    assert gens == [i // 6 for i in range(12)]
    assert all("constraints" in t.system_attrs for t in trials)


def test_optuna_sees_constraints(problem: Problem) -> None:
    from search.optimizers.optuna_sampler import OptunaOptimizer

    opt = make("tpe", problem)
    assert isinstance(opt, OptunaOptimizer)
    drive(opt, problem, 6)
    for t in opt.study.trials:
        assert len(t.constraints) == 2


def test_bad_optimizer_settings() -> None:
    with pytest.raises(ConfigError, match=re.escape("optimizer.name")):
        check_optimizer("cmaes", {})
    with pytest.raises(ConfigError, match=re.escape("optimizer.populaton")):
        check_optimizer("pymoo-nsga2", {"populaton": 4})
    with pytest.raises(ConfigError, match=re.escape("optimizer.population")):
        check_optimizer("pymoo-nsga2", {"population": 1})
    if importlib.util.find_spec("torch") is None:
        with pytest.raises(ConfigError, match="needs torch"):
            check_optimizer("gp", {})


def test_latin_hypercube_spreads_every_knob(problem: Problem) -> None:
    import numpy as np

    from search.optimizers.optuna_sampler import latin_hypercube

    points = latin_hypercube(problem.space, 8, np.random.default_rng(0))
    assert len(points) == 8
    for p in points:
        problem.space.validate(p)
    assert sorted(p["tp"] for p in points) == [1, 1, 2, 2, 4, 4, 8, 8]  # each value twice
    seqs = sorted(p["engine.max_num_seqs"] for p in points)  # one per log-stratum of 16..256
    edges = np.exp(np.linspace(np.log(16), np.log(256), 9))
    assert all(lo - 1 <= s <= hi + 1 for s, lo, hi in zip(seqs, edges[:-1], edges[1:], strict=True))


def test_tpe_starts_with_the_latin_hypercube(problem: Problem) -> None:
    opt = build_optimizer(optimizer_spec("tpe", {"n_startup_trials": 8}), problem, seed=0)
    first = opt.ask(8)
    assert sorted(p["tp"] for p in first) == [1, 1, 2, 2, 4, 4, 8, 8]


def test_latin_hypercube_stepped_floats_are_in_optunas_distribution() -> None:
    import numpy as np

    from search.optimizers.optuna_sampler import latin_hypercube
    from search.store.schema import distribution
    from search.study.space import Space

    space = Space.from_dict(
        {"knobs": {"u": {"type": "float", "low": 0.8, "high": 0.95, "step": 0.05}}}
    )
    dist = distribution(space.knob("u"))
    points = latin_hypercube(space, 64, np.random.default_rng(0))
    assert {p["u"] for p in points} == {0.8, 0.85, 0.9, 0.95}
    assert all(dist._contains(dist.to_internal_repr(p["u"])) for p in points)
