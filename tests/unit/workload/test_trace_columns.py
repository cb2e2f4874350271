"""The streamed, columnar Mooncake reader: the fast path equals the line-by-line one."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from dynosim.errors import WorkloadError
from dynosim.types import HASH_BLOCK_TOKENS, Request
from dynosim.workload import load_trace
from dynosim.workload import traces as traces_module
from dynosim.workload.columns import RowColumns, link
from dynosim.workload.mooncake import _fast_chunk, read_mooncake
from dynosim.workload.trace_fields import FieldReader
from dynosim.workload.traces import load_trace_columns


def _objects(count: int, seed: int) -> list[dict[str, object]]:
    """Random Mooncake lines: times out of order, ids ascending or not, shared prefixes."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for _ in range(count):
        tokens = rng.randint(1, 5000)
        blocks = -(-tokens // HASH_BLOCK_TOKENS)
        ids = rng.sample(range(-50, 10**6), blocks)
        if rng.random() < 0.5:
            ids.sort()
        out.append(
            {
                "timestamp": rng.choice([0, rng.randint(0, 10**7)]),
                "input_length": tokens,
                "output_length": rng.randint(1, 2000),
                "hash_ids": ids,
            }
        )
    return out


def _expected(objects: list[dict[str, object]]) -> list[Request]:
    """What the format means, computed directly: stable sort by time, ms -> s."""
    order = sorted(range(len(objects)), key=lambda i: objects[i]["timestamp"])  # type: ignore[arg-type,return-value]
    return [
        Request(
            id=new,
            arrival_s=float(objects[old]["timestamp"]) / 1000.0,  # type: ignore[arg-type]
            input_tokens=objects[old]["input_length"],  # type: ignore[arg-type]
            output_tokens=objects[old]["output_length"],  # type: ignore[arg-type]
            block_hashes=tuple(objects[old]["hash_ids"]),  # type: ignore[arg-type]
        )
        for new, old in enumerate(order)
    ]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("chunk_bytes", [64, 4096, 1 << 22])
def test_fast_path_reads_random_traces_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    monkeypatch.setattr(traces_module, "CHUNK_BYTES", chunk_bytes)
    objects = _objects(300, seed=chunk_bytes)
    path = _write(tmp_path / "t.jsonl", [json.dumps(o) for o in objects])
    assert load_trace(path) == _expected(objects)


def test_fast_and_slow_paths_give_the_same_columns(tmp_path: Path) -> None:
    objects = _objects(200, seed=1)
    lines = [json.dumps(o) + "\n" for o in objects]
    other = [line.replace('"hash_ids"', '"delay": 0, "hash_ids"') for line in lines]
    fast, slow = RowColumns(), RowColumns()
    assert _fast_chunk(lines, fast)
    assert not _fast_chunk(other, slow)  # another shape: line by line
    reader = FieldReader(tmp_path / "t.jsonl", clamp_zero_output=False)
    read_mooncake(reader, [other[:1], other[1:]], slow)
    for name in ("timestamp_s", "input_tokens", "output_tokens", "counts", "hashes", "delay_s"):
        assert np.array_equal(fast.column(name), slow.column(name)), name
    assert link(fast).requests() == link(slow).requests() == _expected(objects)


def test_other_shapes_in_a_chunk_are_read_line_by_line(tmp_path: Path) -> None:
    lines = [
        '{"timestamp": 5, "input_length": 10, "output_length": 2, "hash_ids": [7]}',
        "",
        '{"hash_ids": [8, 9], "output_length": 3, "input_length": 600, "timestamp": 1}',
        '{"timestamp":2,"input_length":1,"output_length":1,"hash_ids":[1],"session_id":"a"}',
        '{"input_length":1,"output_length":1,"hash_ids":[2],"session_id":"a","delay":500}',
    ]
    got = load_trace(_write(tmp_path / "t.jsonl", lines))
    assert [r.arrival_s for r in got] == [0.001, 0.002, 0.0, 0.005]
    assert [r.block_hashes for r in got] == [(8, 9), (1,), (2,), (7,)]
    assert [(r.session_id, r.after_id, r.delay_s) for r in got] == [
        (None, None, 0.0),
        (0, None, 0.0),
        (0, 1, 0.5),
        (None, None, 0.0),
    ]


GOOD = '{"timestamp": 1, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]}'


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('"hash_ids": [1, 007]', "invalid JSON"),  # a leading zero is not JSON
        ('"hash_ids": [1, 12345678901234567890]', "64-bit integers"),
        ('"hash_ids": [2, 2]', "repeats an id"),
        ('"hash_ids": [5, 3, 5]', "repeats an id"),
        ('"hash_ids": [1]', "needs ceil(600/512) = 2"),
        ('"hash_ids": []', "needs ceil(600/512) = 2"),
        ('"hash_ids": [1 2]', "invalid JSON"),
        ('"hash_ids": [1,,2]', "invalid JSON"),
        ('"hash_ids": [1, -]', "invalid JSON"),
    ],
)
def test_a_bad_line_in_a_later_chunk_names_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str, message: str
) -> None:
    monkeypatch.setattr(traces_module, "CHUNK_BYTES", 256)  # a few lines a chunk
    line = GOOD.replace('"hash_ids": [1, 2]', bad)
    path = _write(tmp_path / "t.jsonl", [GOOD] * 10 + [line] + [GOOD] * 5)
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}:11: ")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("timestamp", "1000000000000", "timestamp must be <"),
        ("input_length", "100000001", "input_length must be <= 100,000,000"),
        ("output_length", "100000001", "output_length must be <= 100,000,000"),
    ],
)
def test_out_of_range_values_in_the_common_shape_are_refused(
    tmp_path: Path, field: str, value: str, message: str
) -> None:
    tokens = 600 if field != "input_length" else int(value)
    ids = list(range(-(-tokens // HASH_BLOCK_TOKENS)))
    obj = {"timestamp": 1, "input_length": tokens, "output_length": 2, "hash_ids": ids}
    obj[field] = int(value)
    path = _write(tmp_path / "t.jsonl", [GOOD, json.dumps(obj)])
    with pytest.raises(WorkloadError, match=rf"t\.jsonl:2: {message}"):
        load_trace(path)


def test_negative_zero_and_large_ids_read_as_json_reads_them(tmp_path: Path) -> None:
    big = 2**63 - 1
    line = (
        f'{{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [-0, {big}, -7]}}'
    )
    (request,) = load_trace(_write(tmp_path / "t.jsonl", [line]))
    assert request.block_hashes == (0, big, -7)


def test_columns_turn_into_the_same_requests(tmp_path: Path) -> None:
    objects = _objects(50, seed=7)
    path = _write(tmp_path / "t.jsonl", [json.dumps(o) for o in objects])
    columns = load_trace_columns(path)
    assert len(columns) == 50
    assert columns.hash_offsets[-1] == columns.hashes.size
    assert columns.requests() == load_trace(path)


@pytest.mark.parametrize("ids", ["[1, -]", "[-, 1]", "[1, - 3]", "[1, 2-]", "[1,-]"])
def test_a_minus_sign_without_its_digits_is_not_read_as_zero(tmp_path: Path, ids: str) -> None:
    line = GOOD.replace("[1, 2]", ids)
    assert not _fast_chunk([line + "\n"], RowColumns())
    with pytest.raises(WorkloadError, match="invalid JSON"):
        load_trace(_write(tmp_path / "t.jsonl", [line]))


# --- Azure CSV ---------------------------------------------------------------------------------

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def _azure_rows(count: int, seed: int) -> list[str]:
    """Random Azure rows: days apart or not, leap seconds, fractions of 0-9 digits, 'T'."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        day = f"20{rng.randint(10, 30)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        clock = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 60):02d}"
        digits = rng.randint(0, 9)
        frac = "." + "".join(rng.choice("0123456789") for _ in range(digits)) if digits else ""
        sep = rng.choice(" T")
        rows.append(f"{day}{sep}{clock}{frac},{rng.randint(1, 9000)},{rng.randint(1, 900)}")
    return rows


def _line_by_line(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[Request]:
    with monkeypatch.context() as patch:
        patch.setattr(traces_module, "read_azure_fast", lambda chunks, rows: False)
        return load_trace(path)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_azure_fast_path_equals_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(traces_module, "CHUNK_BYTES", 1024)
    path = _write(tmp_path / "a.csv", [AZURE_HEADER, *_azure_rows(400, seed)])
    fast = load_trace(path)
    assert fast == _line_by_line(monkeypatch, path)
    assert min(r.arrival_s for r in fast) == 0.0


def test_azure_fast_path_reads_a_hand_computed_case(tmp_path: Path) -> None:
    rows = ["2024-02-28 23:59:60.5,10,2", "2024-02-29T00:00:00,20,3", "2024-02-28 23:59:59.25,5,1"]
    got = load_trace(_write(tmp_path / "a.csv", [AZURE_HEADER, *rows]))
    # 23:59:60.5 is 86,400.5 s into the 28th, i.e. 0.5 s into the 29th (exact integer arithmetic)
    assert [(r.arrival_s, r.input_tokens) for r in got] == [(0.0, 5), (0.75, 20), (1.25, 10)]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("2023-02-30 10:00:00.1,5,5", "TIMESTAMP '2023-02-30 10:00:00.1' is not"),
        ("2023-01-01 24:00:00,5,5", "is not 'YYYY-MM-DD HH:MM:SS.fffffff'"),
        ("0000-01-01 10:00:00,5,5", "is not 'YYYY-MM-DD HH:MM:SS.fffffff'"),
        ("2023-01-01 10:00:00,0,5", "ContextTokens must be >= 1"),
        ("2023-01-01 10:00:00,5,100000001", "GeneratedTokens must be <= 100,000,000"),
        ("2060-01-01 10:00:00,5,5", "s after the trace's first"),
    ],
)
def test_azure_rows_the_fast_path_refuses_get_the_line_by_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row: str, message: str
) -> None:
    monkeypatch.setattr(traces_module, "CHUNK_BYTES", 64)
    good = "2023-01-01 10:00:00.5,5,5"
    path = _write(tmp_path / "a.csv", [AZURE_HEADER, good, good, good, row, good])
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}:5: ")
    assert message in str(info.value)
