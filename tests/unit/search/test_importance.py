"""Knob importance: a study run with a fake simulator where each objective has one driving knob."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from rich.console import Console

from dynosim.config import DeploymentConfig
from dynosim.errors import InfeasibleError
from dynosim.types import Request
from search.results.importance import MIN_TRIALS, ObjectiveImportance, knob_importances
from search.results.pages.study import importance_figure
from search.results.tables import importance_table
from search.results.write import write_report
from search.run.driver import run_study
from search.store.open import load_study
from search.study.objectives import metric_names
from tests.unit.search import fakes

optuna.logging.set_verbosity(optuna.logging.WARNING)

TPUT, SPEED = "output_token_throughput_per_gpu", "output_token_throughput_per_user.avg"


def one_knob_simulate(
    config: DeploymentConfig,
    requests: Sequence[Request],
    *,
    seed: int = 0,
    warmup_requests: int = 0,
) -> fakes.FakeMetrics:
    """Throughput/GPU follows only max_num_seqs, speed/user only tp; tp 8 with 256 cannot run."""
    e = config.engine
    if config.tp == 8 and e.max_num_seqs > 128:
        raise InfeasibleError("model does not fit")
    values = dict.fromkeys(metric_names(), 1.0)
    values.update(
        {
            TPUT: 10.0 * e.max_num_seqs,
            SPEED: 100.0 / config.tp,
            "time_to_first_token.p90": 100.0 if e.max_num_seqs < 256 else 3000.0,
            "wall_s": 0.0,
        }
    )
    return fakes.FakeMetrics(values)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> optuna.Study:
    tmp = tmp_path_factory.mktemp("importance")
    trace = {"trace": "unused.jsonl"}  # the fake simulator takes tiny_requests() instead
    sf = fakes.study(
        tmp, workload=trace, optimizer={"name": "random"}, budget={"max_trials": 48}, seed=1
    )
    run_study(sf, fakes.tiny_requests(), simulate_fn=one_knob_simulate)
    return load_study(sf.storage, sf.name)


def test_the_driving_knob_ranks_first(study: optuna.Study) -> None:
    tput, speed = knob_importances(study)
    assert (tput.metric, tput.direction) == (TPUT, "maximize")
    assert tput.note == speed.note == ""
    assert tput.n_trials < len(study.trials)  # the configs that could not run are left out
    assert set(tput.shares) == {
        "tp",
        "router",
        "kv_router.overlap_weight",
        "engine.max_num_seqs",
        "engine.enable_prefix_caching",
    }
    assert sum(tput.shares.values()) == pytest.approx(1.0)
    assert next(iter(tput.shares)) == "engine.max_num_seqs"
    assert next(iter(speed.shares)) == "tp"
    for imp, knob in ((tput, "engine.max_num_seqs"), (speed, "tp")):
        others = [v for k, v in imp.shares.items() if k != knob]
        assert imp.shares[knob] > 2 * max(others)
    assert knob_importances(study) == [tput, speed]  # deterministic


def test_table_and_html(study: optuna.Study, tmp_path: Path) -> None:
    console = Console(width=120, record=True)
    console.print(importance_table(study.study_name, knob_importances(study)))
    text = console.export_text()
    assert "Knob importance of t (PED-ANOVA" in text
    assert "throughput/GPU ↑" in text
    assert "speed/user avg ↑" in text
    lines = [line for line in text.splitlines() if "│" in line]
    assert "engine.max_num_seqs" in lines[0]  # the first knob row: the largest share
    path = write_report(study, tmp_path)["importance_html"]
    html = path.read_text()
    assert "Plotly.newPlot" in html
    assert "<script src=" not in html
    for knob in ("engine.max_num_seqs", "kv_router.overlap_weight", "tp"):
        assert f'"name":"{knob}"' in html
    fig = importance_figure(study.study_name, knob_importances(study))
    assert fig.layout.barmode == "group"
    assert [t.name for t in fig.data][:1] in (["engine.max_num_seqs"], ["tp"])


def _hand_study(values: Sequence[tuple[float, float]], *, penalised: int = 0) -> optuna.Study:
    study = optuna.create_study(study_name="few", directions=["maximize", "minimize"])
    study.set_user_attr(
        "objectives",
        [{"metric": TPUT, "direction": "maximize"}, {"metric": "gpus", "direction": "minimize"}],
    )
    dists: dict[str, Any] = {
        "tp": CategoricalDistribution([1, 2, 4]),
        "engine.max_num_seqs": IntDistribution(8, 512),
    }
    for i, (tput, gpus) in enumerate(values):
        study.add_trial(
            optuna.trial.create_trial(
                params={"tp": [1, 2, 4][i % 3], "engine.max_num_seqs": 8 + i},
                distributions=dists,
                values=[tput, gpus],
                user_attrs={"metrics": {TPUT: tput, "gpus": gpus}, "feasible": True},
                system_attrs={"constraints": [0.0]},
            )
        )
    for _ in range(penalised):  # could not run: penalty values, no metrics
        study.add_trial(
            optuna.trial.create_trial(
                params={"tp": 4, "engine.max_num_seqs": 512},
                distributions=dists,
                values=[0.0, 1e9],
                user_attrs={"metrics": {}, "feasible": False},
                system_attrs={"constraints": [1e6]},
            )
        )
    return study


def test_too_few_trials_is_a_message(tmp_path: Path) -> None:
    study = _hand_study([(100.0 + i, 8.0) for i in range(MIN_TRIALS - 1)], penalised=5)
    imps = knob_importances(study)
    assert [imp.shares for imp in imps] == [{}, {}]
    assert imps[0].note == f"not enough trials ({MIN_TRIALS - 1} runnable, need {MIN_TRIALS})"
    console = Console(width=200, record=True)
    console.print(importance_table("few", imps))
    text = console.export_text()
    assert "knob importance of few: throughput/GPU ↑: not enough trials (9 runnable" in text
    assert "│" not in text
    assert write_report(study, tmp_path)["importance_html"].exists()
    empty = optuna.create_study(directions=["maximize"])
    assert knob_importances(empty)[0].note.startswith("not enough trials (0 runnable")


def test_constant_objective_is_noted() -> None:
    study = _hand_study([(100.0 + i * (i % 3), 8.0) for i in range(20)])
    tput, gpus = knob_importances(study)
    assert tput.shares
    assert gpus.note == "constant (8 in all 20 runnable trials)"
    console = Console(width=200, record=True)
    console.print(importance_table("few", [tput, gpus]))
    text = console.export_text()
    assert "GPUs ↓: constant" in text
    assert "throughput/GPU ↑" in text


def test_table_of_nothing() -> None:
    imp = ObjectiveImportance(TPUT, "maximize", 0, note="not enough trials")
    assert "not enough trials" in str(importance_table("x", [imp]))
