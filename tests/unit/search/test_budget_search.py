"""Budget-aware search (issue 20): refusals neither fill generations nor stop the study."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from dynosim.errors import InfeasibleError
from search.optimizers import build_optimizer
from search.optimizers.optuna_sampler import OptunaOptimizer
from search.run.driver import run_study
from tests.unit.search import fakes

OBJECTIVES = [
    {"metric": "output_token_throughput", "direction": "maximize"},
    {"metric": "output_token_throughput_per_user", "direction": "maximize"},
]


def _study(
    tmp_path: Path, optimizer: dict[str, object], max_trials: int, patience: int = 2
) -> object:
    return fakes.study(
        tmp_path,
        space=fakes.BUDGET_SPACE,
        objectives=OBJECTIVES,
        optimizer=optimizer,
        budget={"max_trials": max_trials, "tol": 0.001, "patience": patience},
        simulator="tests.unit.search.fakes:simulate_total",
    )


def _grid_best(sf: object) -> tuple[float, dict[str, object]]:
    """The best feasible total throughput over the whole grid, by brute force."""
    problem = sf.problem  # type: ignore[attr-defined]
    best: tuple[float, dict[str, object]] = (0.0, {})
    names = [k.name for k in problem.space.knobs]
    for values in itertools.product(*(k.grid_values() for k in problem.space.knobs)):
        params = dict(zip(names, values, strict=True))
        if not problem.buildable(params):
            continue
        try:
            metrics = fakes.simulate_total(problem.to_config(params), fakes.tiny_requests())
        except InfeasibleError:
            continue
        score = problem.score(metrics.flat())
        if score.feasible and score.values[0] > best[0]:
            best = (score.values[0], params)
    return best


def test_the_budget_space_is_mostly_refused(tmp_path: Path) -> None:
    sf = _study(tmp_path, {"name": "grid"}, 10)
    problem = sf.problem  # type: ignore[attr-defined]
    points = [dict(zip(["tp", "workers"], p, strict=True))
              for p in itertools.product([1, 2, 4, 8], range(1, 17))]  # fmt: skip
    base = {"engine.max_num_seqs": 16, "engine.enable_prefix_caching": True}
    ok = [p for p in points if problem.buildable({**p, **base})]
    assert len(ok) == 8 + 4 + 2 + 1  # tp x workers <= 8
    # hand-computed: TTFT = 50 seqs / tp <= 2000 ms; total = 100 log2(seqs) 1.1 / (1 + 0.15 tp) x 8
    value, params = _grid_best(sf)
    assert params == {"tp": 2, "workers": 4, "engine.max_num_seqs": 64,
                      "engine.enable_prefix_caching": True}  # fmt: skip
    assert value == pytest.approx(100 * 6 * 1.1 / 1.3 * 8 + 0.001 * 20 * 8)


@pytest.mark.parametrize("name", ["optuna-nsga2", "tpe", "pymoo-nsga2", "random"])
def test_proposals_are_buildable(tmp_path: Path, name: str) -> None:
    sf = _study(tmp_path, {"name": name, "population": 8} if "nsga" in name else {"name": name},
                10)  # fmt: skip
    problem = sf.problem  # type: ignore[attr-defined]
    opt = build_optimizer(sf.optimizer, problem, 0)  # type: ignore[attr-defined]
    asked = opt.ask(8)
    assert len(asked) == 8
    assert all(problem.buildable(p) for p in asked)
    if isinstance(opt, OptunaOptimizer):
        assert opt.refused > 0  # 77% of random draws are over the budget


def test_a_budget_heavy_space_reaches_the_grid_optimum(tmp_path: Path) -> None:
    sf = _study(tmp_path, {"name": "optuna-nsga2", "population": 8}, 64)
    best, _ = _grid_best(sf)
    state = run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate_total)
    assert state.n_refused <= 2
    assert max(t.values[0] for t in state.front) == pytest.approx(best)


def test_refused_trials_do_not_end_a_generation(tmp_path: Path) -> None:
    """A grid proposes every point, refusals included: only simulated ones make generations."""
    sf = _study(tmp_path, {"name": "grid"}, 384, patience=100)
    state = run_study(sf, fakes.tiny_requests(), simulate_fn=fakes.simulate_total)
    assert state.n_trials == 384
    assert state.n_refused == 384 - 90
    from search.store.open import load_study

    history = load_study(sf.storage, sf.name).user_attrs["hv_history"]  # type: ignore[attr-defined]
    # generations of 10 simulated trials: 9 full ones and the final forced entry
    assert len(history) == 90 // 10 + 1


def test_resampling_keeps_the_branch_the_sampler_chose() -> None:
    """A free redraw would favour the branch with fewer refusals; the branch knob is kept."""
    import numpy as np
    import optuna

    from search.study.space import Space

    space = Space.from_dict({"knobs": {
        "mode": {"type": "choice", "values": ["agg", "disagg"]},
        "tp": {"type": "choice", "values": [1, 2, 4, 8], "when": {"mode": "agg"}},
        "prefill.workers": {"type": "int", "low": 1, "high": 10, "when": {"mode": "disagg"}},
    }})  # fmt: skip

    def buildable(p: dict[str, object]) -> bool:  # 1 disagg point in 10 fits
        return p["mode"] == "agg" or p["prefill.workers"] == 1

    opt = OptunaOptimizer(space, optuna.samplers.RandomSampler(seed=0), ["maximize"],
                          buildable=buildable)  # fmt: skip
    asked = opt.ask(400)
    assert all(buildable(p) for p in asked)
    share = np.mean([p["mode"] == "disagg" for p in asked])
    assert 0.43 < share < 0.57  # a free redraw: 0.5 x 0.1 / (0.5 + 0.5 x 0.1) = 9%
