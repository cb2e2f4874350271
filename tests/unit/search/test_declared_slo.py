"""Declared SLOs are the study's constraints (issue 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynosim.errors import ConfigError
from search.run.driver import run_study
from search.study.objectives import Constraint
from search.study.study_file import load_study_file, parse_study
from tests.unit.search import fakes

ROOT = Path(__file__).resolve().parents[3]


def _cons(sf: object) -> list[str]:
    return [str(c) for c in sf.problem.constraints]  # type: ignore[attr-defined]


def test_a_declared_slo_becomes_a_constraint(tmp_path: Path) -> None:
    sf = fakes.study(tmp_path, deployment={"slo": {"ttft_ms": 2000, "itl_ms": 50}})
    assert _cons(sf) == ["time_to_first_token.p90 <= 2000", "inter_token_latency.p90 <= 50"]
    assert sf.slo_notes == ()


def test_a_study_level_slo_is_the_deployment_slo(tmp_path: Path) -> None:
    sf = fakes.study(tmp_path, slo={"itl_ms": 30}, constraints=[])
    assert _cons(sf) == ["inter_token_latency.p90 <= 30"]
    assert sf.data["deployment"]["slo"] == {"itl_ms": 30}
    assert "slo" not in sf.data
    again = parse_study(sf.data, base_dir=tmp_path)  # the stored form re-parses the same
    assert _cons(again) == _cons(sf)
    with pytest.raises(ConfigError, match="one place"):
        fakes.study(tmp_path, slo={"itl_ms": 30}, deployment={"slo": {"itl_ms": 30}})


def test_explicit_constraints_override_and_are_reported(tmp_path: Path) -> None:
    sf = fakes.study(
        tmp_path,
        deployment={"slo": {"ttft_ms": 2000, "itl_ms": 50, "e2e_ms": 9000}},
        constraints=["time_to_first_token.p99 <= 3000", {"not_enforced": "itl_ms"}],
    )
    assert _cons(sf) == ["time_to_first_token.p99 <= 3000", "request_latency.p90 <= 9000"]
    assert sf.slo_notes == (
        "declared SLO ttft_ms 2000 is not enforced as time_to_first_token.p90 <= 2000: the "
        "constraints give time_to_first_token.p99 <= 3000",
        "declared SLO itl_ms 50 is not enforced (constraints: {not_enforced: itl_ms})",
    )
    with pytest.raises(ConfigError, match=r"constraints\[0\]"):
        fakes.study(tmp_path, constraints=[{"not_enforced": "ttft"}])


def test_the_declared_itl_slo_decides_feasibility(tmp_path: Path) -> None:
    """The fake reports ITL p90 = 1 ms: an ITL SLO of 0.5 ms makes every trial infeasible."""
    ok = fakes.study(tmp_path, deployment={"slo": {"itl_ms": 2}}, optimizer={"name": "random"},
                     budget={"max_trials": 6})  # fmt: skip
    state = run_study(ok, fakes.tiny_requests(), simulate_fn=fakes.simulate)
    assert state.n_feasible > 0
    tight = fakes.study(tmp_path / "b", deployment={"slo": {"itl_ms": 0.5}},
                        optimizer={"name": "random"}, budget={"max_trials": 6},
                        storage=str(tmp_path / "b.journal"))  # fmt: skip
    state = run_study(tight, fakes.tiny_requests(), simulate_fn=fakes.simulate)
    assert state.n_trials == 6
    assert state.n_feasible == 0


def test_the_quickstart_enforces_both_declared_slos() -> None:
    sf = load_study_file(ROOT / "experiments" / "quickstart.yaml")
    assert Constraint("inter_token_latency.p90", "<=", 50.0) in sf.problem.constraints
    assert Constraint("time_to_first_token.p90", "<=", 2000.0) in sf.problem.constraints


@pytest.mark.parametrize("value", ["", [1], 0, -5, float("nan")])
def test_a_declared_slo_that_is_not_a_positive_number_is_one_line(
    tmp_path: Path, value: object
) -> None:
    with pytest.raises(ConfigError, match=r"deployment\.slo\.ttft_ms: got .*a finite number"):
        fakes.study(tmp_path, deployment={"slo": {"ttft_ms": value}})


def test_trial_budget_is_bounded(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"budget\.max_trials: got 10000000"):
        fakes.study(tmp_path, budget={"max_trials": 10**7})


def test_a_sweep_needs_a_trial_per_level(tmp_path: Path) -> None:
    from tests.unit.search.test_load import CHAT

    (tmp_path / "chat.yaml").write_text(CHAT)
    with pytest.raises(ConfigError, match=r"budget\.max_trials: got 2; allowed: at least one"):
        fakes.study(
            tmp_path,
            workload={"file": str(tmp_path / "chat.yaml")},
            load={"mode": "sweep", "levels": [1, 2, 4]},
            budget={"max_trials": 2},
        )
