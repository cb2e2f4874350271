from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynosim.errors import ConfigError
from search.study.study_file import DEFAULT_STORAGE, load_study_file, parse_study
from tests.unit.search import fakes

ROOT = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, data: dict[str, object]) -> Path:
    f = tmp_path / "study.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    return f


def test_defaults_and_resolution(tmp_path: Path) -> None:
    data = fakes.study_dict(tmp_path)
    for key in ("objectives", "storage", "budget", "executor", "seed", "optimizer"):
        del data[key]
    sf = load_study_file(write(tmp_path, data))
    assert [o.metric for o in sf.problem.objectives] == [
        "output_token_throughput_per_gpu",
        "output_token_throughput_per_user.avg",
    ]
    assert sf.problem.directions == ("maximize", "maximize")
    assert sf.storage == DEFAULT_STORAGE
    assert sf.optimizer.name == "optuna-nsga2"
    assert sf.executor.kind == "ray"
    assert sf.workload.file == str(tmp_path / "unused.yaml")
    assert sf.budget.max_trials == 100


def test_cli_overrides(tmp_path: Path) -> None:
    f = write(tmp_path, fakes.study_dict(tmp_path))
    sf = load_study_file(
        f, {"name": "other", "budget.max_trials": 5, "executor.address": "auto", "seed": None}
    )
    assert sf.name == "other"
    assert sf.budget.max_trials == 5
    assert sf.executor.address == "auto"
    assert sf.seed == 0
    assert sf.data["name"] == "other"


def test_space_file_is_inlined_for_resume(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(fakes.SPACE, sort_keys=False))
    sf = load_study_file(write(tmp_path, fakes.study_dict(tmp_path, space="space.yaml")))
    assert sf.data["space"] == fakes.SPACE
    again = parse_study(sf.data)
    assert again.problem == sf.problem


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nmae": "x"}, "nmae"),
        ({"model": 3}, "model"),
        ({"gpu_budget": 0}, "gpu_budget"),
        ({"objectives": [{"metric": "tput", "direction": "maximize"}]}, "objectives[0].metric"),
        ({"objectives": [{"metric": "goodput", "direction": "up"}]}, "objectives[0].direction"),
        ({"constraints": ["ttft < 3"]}, "constraints[0]"),
        ({"constraints": ["foo.p90 <= 3"]}, "constraints[0].metric"),
        ({"optimizer": {"name": "cmaes"}}, "optimizer.name"),
        ({"optimizer": {"name": "tpe", "population": 3}}, "optimizer.population"),
        ({"budget": {"max_trials": 0}}, "budget.max_trials"),
        ({"budget": {"max_trial": 3}}, "budget.max_trial"),
        ({"executor": {"kind": "dask"}}, "executor.kind"),
        ({"workload": {}}, "workload"),
        ({"workload": {"trace": "t.jsonl", "speedup": 0}}, "workload.speedup"),
        (
            {"space": {"knobs": {"engine.foo": {"type": "choice", "values": [1]}}}},
            "knobs.engine.foo",
        ),
        ({"space": "missing.yaml"}, "space"),
        ({"gpu_budget": True}, "gpu_budget"),
        ({"budget": {"max_trials": 3, "tol": float("nan")}}, "budget.tol"),
    ],
)
def test_malformed_study_gives_one_line_naming_file_and_field(
    tmp_path: Path, change: dict[str, object], field: str
) -> None:
    f = write(tmp_path, fakes.study_dict(tmp_path, **change))
    with pytest.raises(ConfigError) as err:
        load_study_file(f)
    msg = str(err.value)
    assert "\n" not in msg
    assert field in msg
    if field not in ("space",):
        assert msg.startswith(str(f))


def test_bad_yaml(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: [x\n")
    with pytest.raises(ConfigError, match="line"):
        load_study_file(f)


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (ROOT / "experiments").glob("**/*.yaml") if p.parent.name != "workloads"),
    ids=lambda p: str(p.relative_to(ROOT / "experiments")),
)
def test_shipped_studies_parse(path: Path) -> None:
    sf = load_study_file(path)
    assert sf.problem.space.names


def test_storage_in_the_file_is_relative_to_the_file_a_flag_to_the_working_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = tmp_path / "studies"
    sub.mkdir()
    data = fakes.study_dict(tmp_path)
    data["storage"] = "../runs/s.journal"
    f = sub / "study.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_study_file(f).storage == str(tmp_path / "runs/s.journal")
    assert load_study_file(f, {"storage": "x.journal"}).storage == str(elsewhere / "x.journal")
    data["storage"] = "sqlite:///db/s.db"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_study_file(f).storage == f"sqlite:///{sub / 'db/s.db'}"
    data["storage"] = "postgresql+psycopg2://u@h/db"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_study_file(f).storage == "postgresql+psycopg2://u@h/db"
