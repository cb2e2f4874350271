from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dynosim.errors import ConfigError
from search.study.space import Space
from search.trial import params_key
from tests.unit.search.fakes import SPACE

ROOT = Path(__file__).resolve().parents[3]


def test_parse_orders_knobs_and_conditions() -> None:
    space = Space.from_dict(SPACE)
    assert space.names[0] == "tp"
    knob = space.knob("kv_router.overlap_weight")
    assert knob.when == (("router", ("kv_aware",)),)
    assert knob.active({"router": "kv_aware"})
    assert not knob.active({"router": "round_robin"})


def test_grid_enumerates_exactly_the_space() -> None:
    space = Space.from_dict(SPACE)
    points = list(space.grid())
    assert len(points) == 96 == space.grid_size()
    assert len({params_key(p) for p in points}) == 96
    for p in points:
        space.validate(p)
        assert ("kv_router.overlap_weight" in p) == (p["router"] == "kv_aware")
    weights = {p["kv_router.overlap_weight"] for p in points if "kv_router.overlap_weight" in p}
    assert weights == {0.0, 1.0, 2.0}


def test_sample_is_deterministic_and_valid() -> None:
    space = Space.from_dict(SPACE)
    a = [space.sample(np.random.default_rng(3)) for _ in range(5)]
    b = [space.sample(np.random.default_rng(3)) for _ in range(5)]
    assert a == b
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = space.sample(rng)
        space.validate(p)
        assert 16 <= p["engine.max_num_seqs"] <= 256


def test_validate_rejects_inactive_and_out_of_domain() -> None:
    space = Space.from_dict(SPACE)
    good = {
        "tp": 1,
        "router": "round_robin",
        "engine.max_num_seqs": 16,
        "engine.enable_prefix_caching": True,
    }
    space.validate(good)
    with pytest.raises(ConfigError, match="overlap_weight"):
        space.validate({**good, "kv_router.overlap_weight": 1.0})
    with pytest.raises(ConfigError, match="tp"):
        space.validate({**good, "tp": 3})
    with pytest.raises(ConfigError, match="enable_prefix_caching"):
        space.validate({**good, "engine.enable_prefix_caching": 1})


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        ({"tp": {"type": "choise", "values": [1]}}, "knobs.tp.type"),
        ({"tp": {"type": "choice", "values": []}}, "knobs.tp.values"),
        ({"tp": {"type": "int", "low": 4, "high": 1}}, "knobs.tp.high"),
        ({"tp": {"type": "int", "low": 1.5, "high": 4}}, "knobs.tp.low"),
        ({"x": {"type": "float", "low": 0, "high": 1, "log": True}}, "knobs.x.low"),
        ({"x": {"type": "float", "low": 1, "high": 2, "stepp": 1}}, "knobs.x.stepp"),
        ({"x": {"type": "choice", "values": [1], "when": {"y": 1}}}, "knobs.x.when.y"),
        ({"x": {"type": "int", "low": 1, "high": 4, "grid": [9]}}, "knobs.x.grid"),
    ],
)
def test_malformed_space_names_the_field(knobs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        Space.from_dict({"knobs": knobs}, "s.yaml")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"s.yaml: {field}:")


def test_bad_yaml_file_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("knobs: {tp: [1, 2\n")
    with pytest.raises(ConfigError) as err:
        Space.from_yaml(f)
    assert str(f) in str(err.value)
    assert "\n" not in str(err.value)


def test_continuous_float_cannot_be_gridded() -> None:
    space = Space.from_dict({"knobs": {"x": {"type": "float", "low": 0.0, "high": 1.0}}})
    with pytest.raises(ConfigError, match=re.escape("knobs.x")):
        list(space.grid())


@pytest.mark.parametrize("path", sorted((ROOT / "spaces").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_spaces_parse(path: Path) -> None:
    space = Space.from_yaml(path)
    p = space.sample(np.random.default_rng(0))
    space.validate(p)
