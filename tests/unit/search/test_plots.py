"""Plotly figures of a study, on a tiny hand-made study with a known front."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from search.results.hypervolume import HypervolumeTracker, recomputed_hypervolume
from search.results.pages.html import write_html
from search.results.pages.study import convergence_figure, pareto_figures, pareto_scatter

optuna.logging.set_verbosity(optuna.logging.WARNING)

TPUT, SPEED, TTFT = (
    "output_token_throughput_per_gpu",
    "output_token_throughput_per_user.avg",
    "time_to_first_token.p90",
)
DISTS = {"tp": CategoricalDistribution([1, 2, 4]), "engine.max_num_seqs": IntDistribution(1, 512)}
# (tp, max_num_seqs, throughput/GPU, speed/user, ttft p90, feasible)
POINTS = [
    (1, 64, 1000.0, 50.0, 300.0, True),  # front
    (2, 128, 800.0, 40.0, 400.0, True),  # dominated by #0
    (4, 256, 1500.0, 20.0, 900.0, True),  # front
    (4, 512, 2000.0, 60.0, 5000.0, False),  # would dominate, but violates the SLO
    (2, 32, 500.0, 90.0, 200.0, True),  # front
]


def make_study(n_objectives: int = 2) -> optuna.Study:
    objs = [(TPUT, "maximize"), (SPEED, "maximize"), (TTFT, "minimize")][:n_objectives]
    study = optuna.create_study(study_name="tiny", directions=[d for _, d in objs])
    study.set_user_attr("objectives", [{"metric": m, "direction": d} for m, d in objs])
    study.set_user_attr(
        "constraints",
        [
            {"metric": "runnable", "op": ">=", "value": 1.0},
            {"metric": TTFT, "op": "<=", "value": 1e3},
        ],
    )
    study.set_user_attr("hv_history", [[2, 0.1], [5, 0.5]])
    for tp, seqs, tput, speed, ttft, ok in POINTS:
        metrics = {TPUT: tput, SPEED: speed, TTFT: ttft, "goodput": 3.0}
        study.add_trial(
            optuna.trial.create_trial(
                params={"tp": tp, "engine.max_num_seqs": seqs},
                distributions=DISTS,
                values=[metrics[m] for m, _ in objs],
                user_attrs={
                    "metrics": metrics,
                    "feasible": ok,
                    "infeasible_reason": None if ok else "SLO violated: TTFT",
                },
                system_attrs={"constraints": [0.0, (ttft - 1e3) / 1e3]},
            )
        )
    study.add_trial(  # could not run: penalty values, never plotted
        optuna.trial.create_trial(
            params={"tp": 4, "engine.max_num_seqs": 1},
            distributions=DISTS,
            values=[0.0 if d == "maximize" else 1e9 for _, d in objs],
            user_attrs={"metrics": {}, "feasible": False, "infeasible_reason": "OOM"},
            system_attrs={"constraints": [1e6, 1e6]},
        )
    )
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL))
    return study


def _trace(fig: object, prefix: str) -> object:
    return next(t for t in fig.data if t.name.startswith(prefix))  # type: ignore[attr-defined]


def test_pareto_scatter_groups_and_hover() -> None:
    fig = pareto_scatter(make_study())
    front = _trace(fig, "Pareto front")
    assert list(front.x) == [1500.0, 1000.0, 500.0]  # best throughput first, joined by a line
    assert list(front.y) == [20.0, 50.0, 90.0]
    assert "lines" in front.mode
    assert list(_trace(fig, "feasible").x) == [800.0]
    infeasible = _trace(fig, "infeasible")
    assert list(infeasible.x) == [2000.0]
    assert infeasible.marker.symbol == "x"
    assert "SLO violated" in infeasible.text[0]
    assert "engine.max_num_seqs=64" in front.text[1]
    assert "tp=1" in front.text[1]
    assert "TTFT" not in fig.layout.xaxis.title.text
    assert "1 configs could not run" in fig.layout.title.text


def test_one_and_three_objectives() -> None:
    one = pareto_figures(make_study(1))
    assert len(one) == 1
    assert list(_trace(one[0], "Pareto front").x) == [2]  # x = trial number
    three = pareto_figures(make_study(3))
    assert len(three) == 2
    assert three[1].data[0].type == "splom"
    assert len(three[1].data[0].dimensions) == 3


@pytest.mark.parametrize("n_objectives", [1, 2, 3])
def test_recomputed_hypervolume_is_monotone_and_matches_tracker(n_objectives: int) -> None:
    study = make_study(n_objectives)
    x, hv = recomputed_hypervolume(study)
    assert x == list(range(1, 7))  # complete trials only
    assert hv == sorted(hv)
    assert hv[-1] > 0
    feasible = [list(t.values) for t in study.trials if t.user_attrs.get("feasible")]
    tracker = HypervolumeTracker([d.name.lower() for d in study.directions])
    tracker.add(feasible)
    tracker.hypervolume()  # fixes bounds from every feasible point, as the report does
    study.set_user_attr("hv_reference", tracker.reference)
    assert recomputed_hypervolume(study)[1][-1] == pytest.approx(tracker.hypervolume())


def test_convergence_figure_and_offline_html(tmp_path: Path) -> None:
    study = make_study()
    fig = convergence_figure(study)
    stored = _trace(fig, "hypervolume (stored")
    assert list(stored.x) == [2, 5]
    best = _trace(fig, "best so far")
    assert list(best.y) == [1000.0, 1000.0, 1500.0, 1500.0, 1500.0, 1500.0]
    path = write_html([fig, *pareto_figures(study)], tmp_path / "c.html", "tiny <report>")
    text = path.read_text()
    assert text.count("Plotly.newPlot") == 2
    assert "<script src=" not in text
    assert "tiny &lt;report&gt;" in text
    assert "engine.max_num_seqs=256" in text


def test_empty_study_figures() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    assert recomputed_hypervolume(study) == ([], [])
    assert convergence_figure(study) is not None
    assert len(pareto_scatter(study).data) == 3


def test_configs_with_the_same_values_are_one_point() -> None:
    study = make_study()
    first = study.trials[0]  # on the front; a config with another max_num_seqs ties with it
    study.add_trial(
        optuna.trial.create_trial(
            params={"tp": 1, "engine.max_num_seqs": 256},
            distributions=DISTS,
            values=list(first.values),
            user_attrs=dict(first.user_attrs),
            system_attrs=dict(first.system_attrs),
        )
    )
    fig = pareto_scatter(study)
    front = _trace(fig, "Pareto front (4)")
    assert list(front.x) == [1500.0, 1000.0, 500.0]
    text = front.text[1]
    assert text.startswith("<b>trial #0</b> = #7 (2 configs, same objective values)")
    assert "engine.max_num_seqs: any of 64, 256" in text
    assert "tp=1" in text
    assert "engine.max_num_seqs=" not in text
    assert "3 points, 4 configs" in fig.layout.title.text
