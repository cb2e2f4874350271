from __future__ import annotations

import math
import re

import pytest

from dynosim.errors import ConfigError, InfeasibleError
from search.study.objectives import BIG_VIOLATION, Constraint, Objective, metric_name
from search.study.problem import Problem
from search.study.space import Space
from search.trial import config_hash
from tests.unit.search.fakes import SPACE

BASE = {"model": "m", "gpu": "g", "slo": {"ttft_ms": 1000.0}}


def problem(**kw: object) -> Problem:
    args: dict[str, object] = {
        "space": Space.from_dict(SPACE),
        "objectives": (
            Objective("output_token_throughput_per_gpu", "maximize"),
            Objective("time_to_first_token.p90", "minimize"),
        ),
        "constraints": (Constraint.parse("time_to_first_token.p90 <= 2000", "c"),),
        "base": BASE,
        "gpu_budget": 8,
    }
    args.update(kw)
    return Problem(**args)  # type: ignore[arg-type]


P = {
    "tp": 2,
    "router": "kv_aware",
    "kv_router.overlap_weight": 1.0,
    "engine.max_num_seqs": 64,
    "engine.enable_prefix_caching": False,
}


def test_to_config_merges_knobs_and_fills_workers() -> None:
    cfg = problem().to_config(P)
    assert (cfg.tp, cfg.workers, cfg.gpus) == (2, 4, 8)
    assert cfg.engine.max_num_seqs == 64
    assert cfg.kv_router.overlap_weight == 1.0
    assert cfg.slo.ttft_ms == 1000.0


def test_over_budget_is_infeasible_with_reason() -> None:
    with pytest.raises(InfeasibleError, match="tp=2 exceeds the GPU budget of 1"):
        problem(gpu_budget=1).to_config(P)
    space = Space.from_dict(
        {
            "knobs": {
                "tp": {"type": "choice", "values": [2, 4]},
                "workers": {"type": "int", "low": 1, "high": 4},
            }
        }
    )
    prob = problem(space=space)
    assert prob.to_config({"tp": 2, "workers": 4}).gpus == 8
    with pytest.raises(InfeasibleError, match=re.escape("tp*workers=16")):
        prob.to_config({"tp": 4, "workers": 4})


def test_rejected_config_is_infeasible_not_a_crash() -> None:
    space = Space.from_dict({"knobs": {"tp": {"type": "choice", "values": [3]}}})
    with pytest.raises(InfeasibleError, match="power of two"):
        problem(space=space).to_config({"tp": 3})


def test_knob_paths_are_checked() -> None:
    space = Space.from_dict({"knobs": {"engine.max_num_seq": {"type": "choice", "values": [1]}}})
    with pytest.raises(ConfigError, match=re.escape("engine.max_num_seq")):
        problem(space=space)


def test_score_and_penalty() -> None:
    prob = problem()
    s = prob.score({"output_token_throughput_per_gpu": 10.0, "time_to_first_token.p90": 3000.0})
    assert s.values == (10.0, 3000.0)
    assert s.constraints == (0.0, 0.5)
    assert not s.feasible
    assert "time_to_first_token.p90 <= 2000" in (s.reason or "")
    ok = prob.score({"output_token_throughput_per_gpu": 10.0, "time_to_first_token.p90": 100.0})
    assert ok.feasible
    assert ok.reason is None
    assert all(c <= 0 for c in ok.constraints)
    nan = prob.score({"output_token_throughput_per_gpu": math.nan, "time_to_first_token.p90": 1})
    assert not nan.feasible
    assert nan.values[0] == 0.0
    assert nan.constraints[0] == BIG_VIOLATION
    pen = prob.penalty("does not fit")
    assert pen.values == (0.0, 1e9)
    assert all(c == BIG_VIOLATION for c in pen.constraints)
    assert len(pen.constraints) == len(prob.constraint_dicts()) == 2


def test_metric_names() -> None:
    assert metric_name("output_token_throughput_per_user", "x") == (
        "output_token_throughput_per_user.avg"
    )
    with pytest.raises(ConfigError, match=re.escape("objectives[0].metric")):
        metric_name("throughput", "objectives[0].metric")
    c = Constraint.parse({"metric": "goodput", "op": ">=", "value": 5}, "c")
    assert c.violation({"goodput": 4.0}) == pytest.approx(0.2)


def test_config_hash_depends_on_config_workload_seed() -> None:
    cfg = {"tp": 1}
    h = config_hash(cfg, "w", 0)
    assert h == config_hash({"tp": 1}, "w", 0)
    assert (
        len({h, config_hash({"tp": 2}, "w", 0), config_hash(cfg, "v", 0), config_hash(cfg, "w", 1)})
        == 4
    )
