"""Synthetic workloads: spec validation, arrival statistics, structure, determinism."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dynosim.errors import ConfigError, WorkloadError
from dynosim.types import Request
from dynosim.workload import WorkloadSpec, generate, load_trace, load_workload_file

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


def _spec(**overrides: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "requests": 200,
        "arrival": {"process": "poisson", "rate_rps": 8},
        "input_tokens": {"dist": "fixed", "value": 1024},
        "output_tokens": {"dist": "fixed", "value": 128},
        "seed": 3,
    }
    d.update(overrides)
    return d


def _make(**overrides: Any) -> list[Request]:
    return generate(WorkloadSpec.from_dict(_spec(**overrides)))


def _check_structure(requests: list[Request]) -> None:
    seen: set[int] = set()
    for i, r in enumerate(requests):
        assert r.id == i
        assert r.after_id is None or 0 <= r.after_id < r.id
        assert r.input_tokens >= 1
        assert r.output_tokens >= 1
        assert len(r.block_hashes) == -(-r.input_tokens // 512)
        seen.update(r.block_hashes)


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"request": 3}, "request"),
        ({"requests": 0}, "requests"),
        ({"requests": 2.5}, "requests"),
        ({"warmup_requests": -1}, "warmup_requests"),
        ({"arrival": {"process": "poisson", "rate": 3}}, "arrival.rate"),
        ({"arrival": {"process": "poisson"}}, "arrival.rate_rps"),
        ({"arrival": {"process": "poisson", "rate_rps": 0}}, "arrival.rate_rps"),
        ({"arrival": {"process": "gamma", "rate_rps": 1, "cv": -1}}, "arrival.cv"),
        ({"arrival": {"process": "burst", "rate_rps": 1}}, "arrival.process"),
        ({"arrival": {"process": "closed_loop", "concurrency": 0}}, "arrival.concurrency"),
        (
            {"arrival": {"process": "closed_loop", "concurrency": 2, "rate_rps": 1}},
            "arrival.rate_rps",
        ),
        ({"input_tokens": {"dist": "uniform", "low": 10, "high": 5}}, "input_tokens.high"),
        ({"input_tokens": {"dist": "fixed", "value": 0}}, "input_tokens.value"),
        ({"output_tokens": {"dist": "lognormal", "mean": 100}}, "output_tokens.sigma"),
        ({"output_tokens": {"dist": "normal"}}, "output_tokens.dist"),
        (
            {"output_tokens": {"dist": "empirical", "trace": "x", "field": "both"}},
            "output_tokens.field",
        ),
        ({"prefix": {"groups": 0, "tokens": 10}}, "prefix.groups"),
        ({"prefix": {"groups": 2, "tokens": 10, "zipf": 1}}, "prefix.zipf"),
        ({"sessions": {"turns": 2, "think_time_s": -1}}, "sessions.think_time_s"),
    ],
)
def test_bad_spec_names_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        WorkloadSpec.from_dict(_spec(**overrides))
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: got ")


def test_unknown_key_lists_allowed_keys() -> None:
    with pytest.raises(ConfigError) as info:
        WorkloadSpec.from_dict(_spec(arival=1))
    assert "arrival" in info.value.allowed
    assert info.value.value == 1


def test_spec_is_frozen() -> None:
    spec = WorkloadSpec.from_dict(_spec())
    with pytest.raises(AttributeError):
        spec.requests = 5  # type: ignore[misc]


# --- arrivals ---------------------------------------------------------------------------------


def test_poisson_rate_and_exponential_gaps() -> None:
    requests = _make(requests=20_000, arrival={"process": "poisson", "rate_rps": 8})
    arrivals = np.array([r.arrival_s for r in requests])
    assert arrivals[0] == 0.0
    gaps = np.diff(arrivals)
    assert np.all(gaps >= 0)
    # mean gap 1/8 s; std error of the mean ~ 0.125/sqrt(20000) ~ 0.0009 -> 5 sigma
    assert gaps.mean() == pytest.approx(1 / 8, abs=0.0045)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    assert all(r.after_id is None for r in requests)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_cv_and_rate(cv: float) -> None:
    requests = _make(requests=40_000, arrival={"process": "gamma", "rate_rps": 4, "cv": cv})
    gaps = np.diff([r.arrival_s for r in requests])
    assert gaps.mean() == pytest.approx(0.25, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_constant_rate() -> None:
    requests = _make(requests=5, arrival={"process": "constant", "rate_rps": 4})
    assert [r.arrival_s for r in requests] == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_closed_loop_after_id_structure() -> None:
    requests = _make(
        requests=10, arrival={"process": "closed_loop", "concurrency": 4, "ramp_up_s": 2}
    )
    _check_structure(requests)
    assert [r.arrival_s for r in requests[:4]] == [0.0, 0.5, 1.0, 1.5]
    assert [r.after_id for r in requests[:4]] == [None] * 4
    for r in requests[4:]:
        assert (r.after_id, r.delay_s, r.arrival_s) == (r.id - 4, 0.0, 0.0)
        assert r.session_id is None


def test_closed_loop_with_sessions_chains_whole_sessions() -> None:
    requests = _make(
        requests=11,
        arrival={"process": "closed_loop", "concurrency": 2},
        sessions={"turns": 3, "think_time_s": 0.5},
    )
    _check_structure(requests)
    # sessions: [0,1,2] [3,4,5] [6,7,8] [9,10]; session k follows session k-2 on its client
    assert [r.after_id for r in requests] == [None, 0, 1, None, 3, 4, 2, 6, 7, 5, 9]
    assert [r.delay_s for r in requests] == [0, 0.5, 0.5, 0, 0.5, 0.5, 0, 0.5, 0.5, 0, 0.5]
    assert [r.session_id for r in requests] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3]


def test_warmup_requests_are_extra_leading_requests() -> None:
    spec = WorkloadSpec.from_dict(_spec(requests=10, warmup_requests=3))
    assert len(generate(spec)) == 13


# --- lengths ----------------------------------------------------------------------------------


def test_length_distributions() -> None:
    requests = _make(
        requests=20_000,
        input_tokens={"dist": "uniform", "low": 10, "high": 20},
        output_tokens={"dist": "lognormal", "mean": 300, "sigma": 0.5, "max": 2000},
    )
    inputs = np.array([r.input_tokens for r in requests])
    outputs = np.array([r.output_tokens for r in requests])
    assert set(inputs.tolist()) == set(range(10, 21))
    assert outputs.mean() == pytest.approx(300, rel=0.02)
    assert outputs.max() <= 2000
    assert outputs.dtype.kind == "i"
    tiny = _make(output_tokens={"dist": "lognormal", "mean": 1, "sigma": 2})
    assert min(r.output_tokens for r in tiny) == 1


def test_empirical_lengths_come_from_trace(tmp_path: Path) -> None:
    trace = load_trace(DATA / "mooncake_small.jsonl")
    spec = WorkloadSpec.from_dict(
        _spec(
            input_tokens={"dist": "empirical", "trace": "mooncake_small.jsonl"},
            output_tokens={"dist": "empirical", "trace": "mooncake_small.jsonl"},
        ),
        base_dir=DATA,
    )
    assert spec.input_tokens.field == "input"
    assert spec.output_tokens.field == "output"
    requests = generate(spec)
    assert {r.input_tokens for r in requests} == {r.input_tokens for r in trace}
    assert {r.output_tokens for r in requests} == {r.output_tokens for r in trace}
    # relative path resolved at generate time too
    relative = WorkloadSpec.from_dict(
        _spec(input_tokens={"dist": "empirical", "trace": "mooncake_small.jsonl"})
    )
    again = generate(relative, base_dir=DATA)
    assert [r.input_tokens for r in again] == [r.input_tokens for r in requests]


# --- prefixes and sessions --------------------------------------------------------------------


def test_prefix_groups_share_leading_hash_ids() -> None:
    requests = _make(
        requests=400,
        prefix={"groups": 4, "tokens": 2048 + 100},
        input_tokens={"dist": "uniform", "low": 1, "high": 3000},
    )
    _check_structure(requests)
    by_prefix: dict[tuple[int, ...], list[Request]] = {}
    for r in requests:
        by_prefix.setdefault(r.block_hashes[:4], []).append(r)
        assert r.input_tokens >= 2148
    assert len(by_prefix) == 4
    assert all(len(group) > 50 for group in by_prefix.values())
    prefix_ids = {h for key in by_prefix for h in key}
    later = [h for r in requests for h in r.block_hashes[4:]]
    assert len(later) == len(set(later))  # all non-prefix blocks are unique
    assert not prefix_ids & set(later)


def test_zipf_prefix_groups_are_skewed() -> None:
    requests = _make(requests=3000, prefix={"groups": 8, "tokens": 512, "zipf_s": 1.5})
    counts = np.bincount([r.block_hashes[0] for r in requests], minlength=8)
    assert counts[0] > counts[1] > counts[3] > counts[7]
    weights = np.arange(1, 9) ** -1.5
    assert counts[0] / 3000 == pytest.approx(weights[0] / weights.sum(), abs=0.03)


def test_sessions_extend_previous_prompt() -> None:
    requests = _make(
        requests=12,
        sessions={"turns": 4, "think_time_s": 2.0},
        input_tokens={"dist": "uniform", "low": 100, "high": 900},
        output_tokens={"dist": "uniform", "low": 1, "high": 700},
        prefix={"groups": 2, "tokens": 1024},
    )
    _check_structure(requests)
    for r in requests:
        turn = r.id % 4
        assert r.session_id == r.id // 4
        if turn == 0:
            assert r.after_id is None
            continue
        prev = requests[r.id - 1]
        assert (r.after_id, r.delay_s, r.arrival_s) == (prev.id, 2.0, prev.arrival_s)
        assert r.input_tokens - prev.input_tokens - prev.output_tokens in range(100, 901)
        full = prev.input_tokens // 512
        assert r.block_hashes[:full] == prev.block_hashes[:full]
        assert not set(r.block_hashes[full:]) & set(prev.block_hashes)
    heads = {requests[i].block_hashes[:2] for i in range(0, 12, 4)}
    assert len(heads) <= 2


def test_open_loop_sessions_start_on_the_arrival_process() -> None:
    requests = _make(
        requests=7, sessions={"turns": 2}, arrival={"process": "constant", "rate_rps": 1}
    )
    assert [r.arrival_s for r in requests] == [0, 0, 1, 1, 2, 2, 3]
    assert [r.after_id for r in requests] == [None, 0, None, 2, None, 4, None]


# --- determinism ------------------------------------------------------------------------------


def test_same_seed_same_requests_and_different_seed_differs() -> None:
    overrides: dict[str, Any] = {
        "arrival": {"process": "gamma", "rate_rps": 5, "cv": 2},
        "input_tokens": {"dist": "lognormal", "mean": 800, "sigma": 1},
        "prefix": {"groups": 3, "tokens": 600},
    }
    assert _make(**overrides) == _make(**overrides)
    assert _make(**overrides) != _make(**overrides, seed=4)
    spec = WorkloadSpec.from_dict(_spec(**overrides))
    with_rng = generate(spec, np.random.default_rng(11))
    assert with_rng == generate(spec, np.random.default_rng(11))
    assert with_rng != generate(spec)


# --- YAML files -------------------------------------------------------------------------------


def test_load_workload_file(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "requests: 5\nwarmup_requests: 2\n"
        "arrival: {process: closed_loop, concurrency: 2}\n"
        "input_tokens: {dist: fixed, value: 10}\noutput_tokens: {dist: fixed, value: 3}\n"
    )
    workload = load_workload_file(path)
    assert (workload.name, workload.warmup_requests, len(workload.requests)) == ("w", 2, 7)
    (tmp_path / "t.jsonl").write_text((DATA / "mooncake_small.jsonl").read_text())
    path.write_text("trace: t.jsonl\nspeedup: 2\nmax_requests: 3\nname: replay\n")
    workload = load_workload_file(path)
    assert workload.name == "replay"
    assert [r.arrival_s for r in workload.requests] == [0.0, 0.0, 0.75]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("requests: 5\narrival: {process: poisson, rate_rps: -2}\n", ": arrival.rate_rps: got -2"),
        ("requests: [1, 2\n", ":2: invalid YAML"),
        ("- 1\n- 2\n", ": workload: got [1, 2]"),
        ("trace: t.jsonl\nspeed: 2\n", ": speed: got 2"),
        ("trace: missing.jsonl\n", "missing.jsonl: cannot read trace"),
    ],
)
def test_load_workload_file_errors_are_one_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError) as info:
        load_workload_file(path)
    assert expected in str(info.value)
    assert str(path.parent) in str(info.value)
    assert "\n" not in str(info.value)


def test_relative_empirical_trace_from_a_relative_workload_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "wl"
    folder.mkdir()
    (folder / "lens.csv").write_text("arrival_s,input_tokens,output_tokens\n0,100,7\n1,200,9\n")
    (folder / "emp.yaml").write_text(
        "requests: 5\narrival: {process: constant, rate_rps: 1}\n"
        "input_tokens: {dist: empirical, trace: lens.csv}\n"
        "output_tokens: {dist: fixed, value: 3}\n"
    )
    monkeypatch.chdir(tmp_path)
    workload = load_workload_file("wl/emp.yaml")
    assert {r.input_tokens for r in workload.requests} <= {100, 200}
