"""The parsed-trace cache: a hit is the parse, a changed or damaged entry is parsed again."""

from __future__ import annotations

import json
import random
import warnings
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from dynosim import Simulation
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.types import HASH_BLOCK_TOKENS, Request
from dynosim.workload import columns as columns_module
from dynosim.workload import load_trace, trace_cache
from dynosim.workload import traces as traces_module
from dynosim.workload.columns import RequestColumns
from dynosim.workload.traces import load_trace_columns
from tests.conftest import tiny_config


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cache root that caches every trace, however small."""
    root = tmp_path / "cache"
    monkeypatch.setenv("DYNOSIM_CACHE_DIR", str(root))
    monkeypatch.delenv("DYNOSIM_NO_TRACE_CACHE", raising=False)
    monkeypatch.setattr(trace_cache, "MIN_BYTES", 0)
    return root


def _trace(path: Path, count: int = 300, seed: int = 0, sessions: bool = False) -> Path:
    """A Mooncake trace (sessions and delays take the line-by-line path)."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        tokens = rng.randint(1, 3000)
        line: dict[str, object] = {
            "timestamp": rng.randint(0, 10**6),
            "input_length": tokens,
            "output_length": rng.randint(0 if sessions else 1, 500),
            "hash_ids": rng.sample(range(10**6), -(-tokens // HASH_BLOCK_TOKENS)),
        }
        if sessions:
            line |= {"session_id": i % 7, "delay": rng.randint(0, 3000)}
        lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n")
    return path


def _parsed(path: Path, clamp: bool = False) -> RequestColumns:
    return traces_module._parse(path, clamp)[0]


def _same(a: RequestColumns, b: RequestColumns) -> None:
    for f in fields(RequestColumns):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.dtype == y.dtype, f.name
        assert np.array_equal(x, y), f.name


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: Path, clamp: bool) -> None:
        raise AssertionError("parsed instead of read from the cache")

    monkeypatch.setattr(traces_module, "_parse", refuse)


@pytest.mark.parametrize("sessions", [False, True])
def test_a_hit_returns_the_columns_of_a_fresh_parse(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sessions: bool
) -> None:
    path = _trace(tmp_path / "t.jsonl", sessions=sessions)
    fresh = _parsed(path, clamp=sessions)
    with warnings.catch_warnings(record=True):
        first = load_trace_columns(path, clamp_zero_output=sessions)
    entries = list((cache / "traces").iterdir())
    assert len(entries) == 1
    _no_parse(monkeypatch)
    with warnings.catch_warnings(record=True):
        hit = load_trace_columns(path, clamp_zero_output=sessions)
    _same(first, fresh)
    _same(hit, fresh)
    assert hit.requests() == first.requests()


def test_a_hit_warns_of_clamped_outputs_again(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [1]}\n')
    for _ in range(2):
        with pytest.warns(UserWarning, match="1 requests with 0 output tokens clamped to 1"):
            load_trace(path, clamp_zero_output=True)
    assert len(list((cache / "traces").iterdir())) == 1


def test_a_changed_trace_misses_the_cache(cache: Path, tmp_path: Path) -> None:
    path = _trace(tmp_path / "t.jsonl")
    before = load_trace_columns(path)
    text = path.read_text()
    path.write_text(text.replace('"output_length": ', '"output_length": 1', 1))  # 7 -> 17
    after = load_trace_columns(path)
    _same(after, _parsed(path))
    assert not np.array_equal(before.output_tokens, after.output_tokens)
    assert len(list((cache / "traces").iterdir())) == 2


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"not a zip file",
        "truncated",
        "other parser",
        "inconsistent",
    ],
)
def test_a_damaged_or_stale_entry_is_parsed_again_and_rewritten(
    cache: Path, tmp_path: Path, damage: bytes | str
) -> None:
    path = _trace(tmp_path / "t.jsonl")
    good = load_trace_columns(path)
    entry = trace_cache.entry_path(path, False)
    assert entry is not None
    assert entry.is_file()
    blob = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(blob[: len(blob) // 2])
    elif damage == "other parser":
        _rewrite(entry, parser=np.array("an older parser"))
    elif damage == "inconsistent":
        _rewrite(entry, hashes=np.zeros(3, dtype=np.int64))
    else:
        assert isinstance(damage, bytes)
        entry.write_bytes(damage)
    _same(load_trace_columns(path), good)
    assert entry.read_bytes() == blob  # rewritten whole


def _rewrite(entry: Path, **changes: np.ndarray) -> None:
    with np.load(entry) as data:
        arrays = {name: data[name] for name in data.files}
    with entry.open("wb") as f:
        np.savez(f, **(arrays | changes))


def test_an_unwritable_cache_still_simulates(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.write_text("a file where the cache folder should be")
    path = _trace(tmp_path / "t.jsonl", count=40)
    requests = load_trace(path)
    assert cache.is_file()
    assert len(requests) == 40
    perf = DeploymentPerf(LinearStepTime(), 50_000, gpu_hour_usd=1.0, kv_bytes_per_token=4096)
    result = Simulation(tiny_config(), requests, perf=perf).run()
    assert result.metrics.completed_requests == 40


def test_the_cache_never_writes_next_to_the_trace(cache: Path, tmp_path: Path) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    path = _trace(folder / "t.jsonl")
    load_trace(path)
    load_trace(path)
    assert [p.name for p in folder.iterdir()] == ["t.jsonl"]


def test_the_cache_can_be_turned_off(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DYNOSIM_NO_TRACE_CACHE", "1")
    path = _trace(tmp_path / "t.jsonl")
    _same(load_trace_columns(path), _parsed(path))
    assert not cache.exists()


def test_small_traces_are_not_cached(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _trace(tmp_path / "t.jsonl", count=20)
    monkeypatch.setattr(trace_cache, "MIN_BYTES", path.stat().st_size + 1)
    load_trace(path)
    assert not cache.exists()


def test_the_root_follows_the_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DYNOSIM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    entry = trace_cache.entry_path(_trace(tmp_path / "t.jsonl", count=5), False)
    assert entry is not None
    assert entry.parent == tmp_path / "xdg" / "dynosim" / "traces"


def test_requests_fill_every_field_as_the_constructor_does() -> None:
    assert tuple(f.name for f in fields(Request)) == columns_module._FIELDS
    made = traces_module.link(_rows()).requests()
    assert made == [
        Request(id=0, arrival_s=0.5, input_tokens=600, output_tokens=3, block_hashes=(4, 5),
                session_id=0, after_id=None, delay_s=0.0),
        Request(id=1, arrival_s=0.0, input_tokens=10, output_tokens=2, block_hashes=(4,),
                session_id=0, after_id=0, delay_s=1.5),
    ]  # fmt: skip


def _rows() -> columns_module.RowColumns:
    rows = columns_module.RowColumns()
    rows.add_row(0.5, 600, 3, (4, 5), "s", 0.0)
    rows.add_row(0.0, 10, 2, (4,), "s", 1.5)
    return rows
