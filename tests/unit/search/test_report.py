"""Study reports over hand-made trials that follow the storage contract."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console

from dynosim.errors import DynosimError
from search.cli import main
from search.cli.study.report import study_summary
from search.results.best import SloSet, best_lines, best_per_slo, default_slo_sets
from search.results.front import group_trials, pareto_groups, pareto_trials, same_values
from search.results.tables import pareto_table, studies_table, trials_frame
from search.results.write import write_report
from search.store.open import load_study
from search.store.schema import is_feasible
from search.study.objectives import Constraint

optuna.logging.set_verbosity(optuna.logging.WARNING)

TTFT = "time_to_first_token.p90"
OBJECTIVES = [
    {"metric": "output_token_throughput_per_gpu", "direction": "maximize"},
    {"metric": "output_token_throughput_per_user.avg", "direction": "maximize"},
    {"metric": TTFT, "direction": "minimize"},
]
CONSTRAINTS = [
    {"metric": "runnable", "op": ">=", "value": 1.0},
    {"metric": TTFT, "op": "<=", "value": 2000.0},
]
DISTS = {
    "tp": CategoricalDistribution([1, 2, 4, 8]),
    "engine.max_num_seqs": IntDistribution(8, 512),
    "router": CategoricalDistribution(["round_robin", "kv"]),
}


def _metrics(rng: np.random.Generator) -> dict[str, float]:
    return {
        "output_token_throughput_per_gpu": float(rng.uniform(100, 3000)),
        "output_token_throughput_per_user.avg": float(rng.uniform(5, 120)),
        TTFT: float(rng.uniform(100, 4000)),
        "inter_token_latency.p90": float(rng.uniform(5, 80)),
        "goodput": float(rng.uniform(0, 20)),
        "prefix_cache_hit_rate": float(rng.uniform(0, 1)),
        "cost_per_million_output_tokens": float(rng.uniform(0.1, 5)),
    }


def _params(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "tp": int(rng.choice([1, 2, 4, 8])),
        "engine.max_num_seqs": int(rng.integers(8, 513)),
        "router": str(rng.choice(["round_robin", "kv"])),
    }


def make_study(storage: Any, name: str = "demo", n_objectives: int = 2) -> optuna.Study:
    """30 runnable trials (some violate the TTFT SLO), penalised, failed and running ones."""
    objs = OBJECTIVES[:n_objectives]
    study = optuna.create_study(
        study_name=name, storage=storage, directions=[o["direction"] for o in objs]
    )
    study.set_user_attr("objectives", objs)
    study.set_user_attr("constraints", CONSTRAINTS)
    study.set_user_attr("status", "budget")
    study.set_user_attr("hv_history", [[10, 0.2], [20, 0.35], [30, 0.41]])
    rng = np.random.default_rng(7)
    rows: list[tuple[dict[str, Any], dict[str, float]]] = [
        (_params(rng), _metrics(rng)) for _ in range(30)
    ]
    ok = [i for i, (_, m) in enumerate(rows) if m[TTFT] <= 2000]
    top = max(ok, key=lambda i: rows[i][1]["output_token_throughput_per_gpu"])
    study.set_user_attr("top", top)
    rows.append((dict(rows[top][0]), dict(rows[top][1])))  # a duplicate of a front member: #30
    for params, m in rows:
        violation = (m[TTFT] - 2000.0) / 2000.0
        feasible = violation <= 0
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=DISTS,
                values=[m[o["metric"]] for o in objs],
                user_attrs={
                    "metrics": m,
                    "config": {"model": "llama", **params},
                    "config_hash": f"h{len(study.trials)}",
                    "seed": 0,
                    "feasible": feasible,
                    "infeasible_reason": None if feasible else f"SLO violated: {TTFT} <= 2000",
                    "wall_s": 0.5,
                },
                system_attrs={"constraints": [0.0, violation]},
            )
        )
    penalty = [0.0 if o["direction"] == "maximize" else 1e9 for o in objs]
    study.add_trial(  # a config that could not run: penalty values, no metrics
        optuna.trial.create_trial(
            params={"tp": 8, "engine.max_num_seqs": 512, "router": "kv"},
            distributions=DISTS,
            values=penalty,
            user_attrs={"metrics": {}, "feasible": False, "infeasible_reason": "does not fit"},
            system_attrs={"constraints": [1e6, 1e6]},
        )
    )
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.FAIL,
            params={"tp": 1, "engine.max_num_seqs": 64, "router": "kv"},
            distributions=DISTS,
        )
    )
    study._storage.create_new_trial(
        study._study_id, template_trial=optuna.trial.create_trial(state=TrialState.RUNNING)
    )
    return study


def _dominates(a: FrozenTrial, b: FrozenTrial, directions: list[str]) -> bool:
    sa = [v if d == "minimize" else -v for v, d in zip(a.values, directions, strict=True)]
    sb = [v if d == "minimize" else -v for v, d in zip(b.values, directions, strict=True)]
    return all(x <= y for x, y in zip(sa, sb, strict=True)) and sa != sb


@pytest.fixture
def journal(tmp_path: Path) -> str:
    return str(tmp_path / "studies.journal")


@pytest.mark.parametrize("n_objectives", [1, 2, 3])
def test_pareto_is_exactly_the_nondominated_feasible_trials(n_objectives: int) -> None:
    study = make_study(optuna.storages.InMemoryStorage(), n_objectives=n_objectives)
    dirs = [d.name.lower() for d in study.directions]
    feasible = [t for t in study.trials if is_feasible(t)]
    expected = {t.number for t in feasible if not any(_dominates(o, t, dirs) for o in feasible)}
    front = pareto_trials(study)
    assert {t.number for t in front} == expected
    assert all(t.user_attrs["metrics"][TTFT] <= 2000 for t in front)
    assert {study.user_attrs["top"], 30} <= expected
    firsts = [t.values[0] for t in front]
    assert firsts == sorted(firsts, reverse=True)


def test_trials_frame_has_every_trial_and_metric() -> None:
    study = make_study(optuna.storages.InMemoryStorage())
    rows = trials_frame(study)
    assert len(rows) == len(study.trials) == 34
    assert all(list(r) == list(rows[0]) for r in rows)
    for metric in study.trials[0].user_attrs["metrics"]:
        assert f"metrics.{metric}" in rows[0]
    assert {"params.tp", "params.router", "objective.output_token_throughput_per_gpu"} <= set(
        rows[0]
    )
    assert [r["state"] for r in rows[-2:]] == ["FAIL", "RUNNING"]
    assert sum(r["pareto"] for r in rows) == len(pareto_trials(study))


def test_write_report_files(tmp_path: Path) -> None:
    study = make_study(optuna.storages.InMemoryStorage(), n_objectives=3)
    paths = write_report(study, tmp_path / "out")
    assert set(paths) == {
        "trials_csv",
        "pareto_csv",
        "pareto_html",
        "convergence_html",
        "importance_html",
    }
    with paths["trials_csv"].open() as f:
        trials = list(csv.DictReader(f))
    with paths["pareto_csv"].open() as f:
        pareto = list(csv.DictReader(f))
    assert len(trials) == len(study.trials)
    assert "metrics.goodput" in trials[0]
    assert "metrics.prefix_cache_hit_rate" in trials[0]
    top = study.user_attrs["top"]  # #30 is a copy of it: one row for both
    assert [int(r["number"]) for r in pareto] == [
        t.number for t in pareto_trials(study) if t.number != 30
    ]
    row = next(r for r in pareto if int(r["number"]) == top)
    assert (row["configs"], row["group_trials"]) == ("2", f"{top} 30")
    assert list(pareto[0])[:3] == ["number", "configs", "group_trials"]
    for key in ("pareto_html", "convergence_html", "importance_html"):
        text = paths[key].read_text()
        assert '<script src="http' not in text
        assert "src='http" not in text
        assert "Plotly.newPlot" in text
    html = paths["pareto_html"].read_text()
    best = pareto_trials(study)[0]
    assert f"trial #{best.number}" in html
    assert f"engine.max_num_seqs={best.params['engine.max_num_seqs']}" in html
    assert "splom" in html


def test_write_report_without_feasible_trials(tmp_path: Path) -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL))
    paths = write_report(study, tmp_path)
    assert paths["pareto_csv"].read_text().startswith("number,")
    assert paths["convergence_html"].exists()
    assert pareto_table(study).row_count == 0


def test_best_per_slo_maximises_first_objective_under_each_set() -> None:
    study = make_study(optuna.storages.InMemoryStorage())
    sets = default_slo_sets(study)
    assert [s.label for s in sets][1:] == ["TTFT p90 ≤ 500 ms", "TTFT p90 ≤ 1000 ms"]
    loose = SloSet("TTFT p90 ≤ 3000 ms", (Constraint(TTFT, "<=", 3000.0),))
    for slo, best in best_per_slo(study, [*sets, loose]):
        ok = [
            t
            for t in study.trials
            if t.user_attrs.get("metrics")
            and all(c.violation(t.user_attrs["metrics"]) <= 0 for c in slo.constraints)
        ]
        if not ok:
            assert best is None
            continue
        assert best is not None
        assert best.values[0] == max(t.values[0] for t in ok)
    lines = best_lines(study)
    assert lines[0].startswith("study SLOs (TTFT p90 ≤ 2000 ms): trial #")
    assert "tok/s/GPU" in lines[0]
    assert "tp=" in lines[0]


def test_table_and_summary_render() -> None:
    study = make_study(optuna.storages.InMemoryStorage(), n_objectives=2)
    console = Console(width=200, record=True)
    console.print(pareto_table(study))
    text = console.export_text()
    assert "throughput/GPU ↑" in text
    assert "(tok/s/GPU)" in text
    assert "≤ 2000 ms" in text
    assert "max_num_seqs" in text
    summary = study_summary(study)
    assert "34 trials (32 complete, 1 running, 1 failed)" in summary
    assert "hypervolume 0.4100" in summary
    assert "configs" in text
    assert "(and #30: 2 configs with these values)" in best_lines(study)[0]


def test_load_study_errors(journal: str, tmp_path: Path) -> None:
    with pytest.raises(DynosimError, match="no storage file"):
        load_study(str(tmp_path / "missing.journal"), "demo")
    make_study(optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal)))
    with pytest.raises(DynosimError, match=r"no study 'nope' .*\(studies: demo\)"):
        load_study(journal, "nope")
    assert load_study(journal, "demo").study_name == "demo"


def test_cli_report(
    journal: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    make_study(optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal)))
    out = tmp_path / "rep"
    assert main(["report", "demo", "--storage", journal, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Pareto front of demo" in text
    assert "best configuration under each SLO" in text
    assert "Knob importance of demo (PED-ANOVA, 31 runnable trials)" in text
    assert (out / "pareto.html").exists()
    assert (out / "importance.html").exists()
    assert (out / "trials.csv").exists()

    assert main(["report", "nope", "--storage", journal]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "demo" in err


def test_cli_report_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    make_study(url, name="sq")
    assert main(["report", "sq", "--storage", url, "--out", str(tmp_path / "r")]) == 0
    assert "Pareto front of sq" in capsys.readouterr().out


def test_studies_table(journal: str) -> None:
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    study = make_study(storage)
    make_study(storage, name="other", n_objectives=1)
    console = Console(width=200, record=True)
    console.print(studies_table(journal))
    text = console.export_text()
    assert "demo" in text
    assert "other" in text
    n_feasible = sum(is_feasible(t) for t in study.trials)
    assert re.search(rf"demo .* 34 │ +32/1/1 │ +{n_feasible} │ +6 │ 0\.4100", text)
    assert "0.4100" in text


# --------------------------------------------------------------------------- same values
def tie_study(rel_delta: float) -> optuna.Study:
    """#1 is #0 with another max_num_seqs, trading ``rel_delta`` of speed for as much throughput."""
    objs = OBJECTIVES[:2]
    study = optuna.create_study(study_name="ties", directions=[o["direction"] for o in objs])
    study.set_user_attr("objectives", objs)
    study.set_user_attr("constraints", CONSTRAINTS)
    points = [  # tp, max_num_seqs, throughput/GPU, speed/user
        (1, 128, 1000.0, 50.0),
        (1, 256, 1000.0 * (1.0 + rel_delta), 50.0 * (1.0 - rel_delta)),
        (2, 64, 500.0, 90.0),
        (4, 64, 400.0, 40.0),  # dominated
    ]
    for tp, seqs, tput, speed in points:
        m = {"output_token_throughput_per_gpu": tput,
             "output_token_throughput_per_user.avg": speed, TTFT: 300.0}  # fmt: skip
        study.add_trial(
            optuna.trial.create_trial(
                params={"tp": tp, "engine.max_num_seqs": seqs, "router": "kv"},
                distributions=DISTS,
                values=[tput, speed],
                user_attrs={"metrics": m, "feasible": True},
                system_attrs={"constraints": [0.0, -0.85]},
            )
        )
    return study


def _table_text(study: optuna.Study) -> str:
    console = Console(width=200, record=True)
    console.print(pareto_table(study))
    return console.export_text()


@pytest.mark.parametrize("rel_delta", [0.0, 1e-12])
def test_same_objective_values_are_one_row(rel_delta: float, tmp_path: Path) -> None:
    study = tie_study(rel_delta)
    groups = pareto_groups(study)
    assert [g.numbers for g in groups] == [[0, 1], [2]]
    assert groups[0].any_of() == {"engine.max_num_seqs": [128, 256]}
    table = pareto_table(study)
    assert table.row_count == 2
    text = _table_text(study)
    assert "2 points (3 configs) of 4 feasible trials" in text
    row = next(line for line in text.splitlines() if "any of" in line)
    assert re.search(r"│ +0 │ +2 │ +any of 128, 256 │", row)
    assert "tp=" not in text.split("same in every")[0]  # tp differs between rows: a column
    with (write_report(study, tmp_path)["pareto_csv"]).open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["number"], r["configs"], r["group_trials"]) for r in rows] == [
        ("0", "2", "0 1"),
        ("2", "1", "2"),
    ]
    assert rows[0]["params.engine.max_num_seqs"] == "any of 128, 256"
    assert rows[1]["params.engine.max_num_seqs"] == "64"
    best = best_lines(study)[0]
    assert "trial #0 (and #1: 2 configs with these values)" in best
    assert "\n    engine.max_num_seqs: any of 128, 256" in best
    assert "engine.max_num_seqs=" not in best


def test_slightly_different_values_are_two_rows() -> None:
    study = tie_study(1e-6)
    assert [g.numbers for g in pareto_groups(study)] == [[1], [0], [2]]
    text = _table_text(study)
    assert "any of" not in text
    assert "configs" not in text
    assert "3 of 4 feasible trials" in text
    assert "and #" not in best_lines(study)[0]


def test_group_trials_rules() -> None:
    study = tie_study(0.0)
    t = study.trials
    fail = optuna.trial.create_trial(state=TrialState.FAIL)
    groups = group_trials([t[2], t[1], fail, t[0], t[3]])
    assert [g.numbers for g in groups] == [[2], [0, 1], [fail.number], [3]]
    assert groups[1].first.number == 0  # the lowest number stands for the group
    assert same_values([0.0, 1.0], [0.0, 1.0])
    assert not same_values([0.0], [1e-300])
    assert not same_values([float("nan")], [float("nan")])
    assert not same_values(None, None)
    assert not same_values([1.0], [1.0, 2.0])
