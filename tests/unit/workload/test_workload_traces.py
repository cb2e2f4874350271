"""Trace readers: small fixtures, malformed lines, and the real traces when present."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynosim.errors import ConfigError, WorkloadError
from dynosim.types import Request
from dynosim.workload import load_trace, load_trace_workload

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
REAL = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _check_structure(requests: list[Request]) -> None:
    for i, r in enumerate(requests):
        assert r.id == i
        assert r.after_id is None or r.after_id < r.id
        assert r.input_tokens >= 1
        assert r.output_tokens >= 1


# --- small fixtures ---------------------------------------------------------------------------


def test_mooncake_fixture() -> None:
    requests = load_trace(DATA / "mooncake_small.jsonl")
    _check_structure(requests)
    assert [r.arrival_s for r in requests] == [0.0, 0.0, 1.5, 2.0, 2.5]
    assert [r.input_tokens for r in requests] == [1000, 1024, 1025, 300, 2000]
    assert requests[0].block_hashes == (0, 1)
    assert isinstance(requests[0].block_hashes, tuple)
    assert requests[2].session_id == 0
    assert requests[2].after_id is None
    assert requests[4].session_id == 0
    assert requests[4].after_id == 2
    assert requests[4].delay_s == pytest.approx(0.25)
    assert requests[3].session_id is None


def test_mooncake_unsorted_timestamps_sort_stably_keeping_turn_order(tmp_path: Path) -> None:
    lines = [
        '{"timestamp": 3000, "input_length": 10, "output_length": 1, "hash_ids": [9]}',
        '{"timestamp": 1000, "input_length": 10, "output_length": 2, "hash_ids": [1],'
        ' "session_id": 7}',
        '{"timestamp": 1000, "input_length": 10, "output_length": 3, "hash_ids": [2]}',
        # later turn with an earlier timestamp than its previous turn: stays after it
        '{"timestamp": 500, "input_length": 20, "output_length": 4, "hash_ids": [3],'
        ' "session_id": 7}',
        '{"input_length": 30, "output_length": 5, "hash_ids": [4], "session_id": 7}',
    ]
    requests = load_trace(_write(tmp_path, "t.jsonl", "\n".join(lines)))
    _check_structure(requests)
    assert [r.output_tokens for r in requests] == [2, 3, 4, 5, 1]
    assert [r.after_id for r in requests] == [None, None, 0, 2, None]
    assert requests[3].arrival_s == 0.0  # no timestamp: only waits for the previous turn
    assert requests[0].session_id == 7 - 7  # sessions renumbered densely


def test_azure_fixture_parses_timestamps_exactly() -> None:
    requests = load_trace(DATA / "azure_small.csv")
    _check_structure(requests)
    assert requests[0].arrival_s == 0.0
    assert requests[1].arrival_s == 4.314579
    assert requests[2].arrival_s == 4.541877
    assert requests[3].arrival_s == 20653.3194099
    assert requests[4].arrival_s == 20653.3194101  # crosses midnight
    assert all(r.block_hashes == () for r in requests)
    assert [r.output_tokens for r in requests] == [44, 109, 55, 1, 2]


def test_generic_fixture() -> None:
    requests = load_trace(DATA / "generic_small.csv")
    _check_structure(requests)
    assert [r.arrival_s for r in requests] == [0.0, 0.25, 1.5, 1.5]
    assert requests[0].block_hashes == (1,)
    assert requests[2].block_hashes == (3, 4)
    assert requests[1].block_hashes == ()
    assert (requests[1].session_id, requests[1].after_id) == (0, None)
    assert (requests[2].session_id, requests[2].after_id) == (0, 1)


def test_format_detected_by_content_not_extension(tmp_path: Path) -> None:
    path = _write(tmp_path, "trace.csv", (DATA / "mooncake_small.jsonl").read_text())
    assert len(load_trace(path)) == 5
    path = _write(tmp_path, "trace.jsonl", (DATA / "azure_small.csv").read_text())
    assert len(load_trace(path)) == 5


def test_trace_workload_speedup_and_max_requests() -> None:
    workload = load_trace_workload(DATA / "mooncake_small.jsonl", speedup=2.0, max_requests=4)
    assert workload.name == "mooncake_small"
    assert workload.warmup_requests == 0
    assert [r.arrival_s for r in workload.requests] == [0.0, 0.0, 0.75, 1.0]
    with pytest.raises(ConfigError, match="speedup"):
        load_trace_workload(DATA / "mooncake_small.jsonl", speedup=0.0)


# --- malformed lines --------------------------------------------------------------------------

GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'
MOONCAKE_BAD = {
    "bad JSON": ('{"timestamp": 0, "input_length": 600', "invalid JSON"),
    "not an object": ("[1, 2]", "expected a JSON object"),
    "missing field": ('{"timestamp": 0, "input_length": 600, "hash_ids": [0, 1]}', "output_length"),
    "missing timestamp": (
        '{"input_length": 600, "output_length": 5, "hash_ids": [0, 1]}',
        "timestamp",
    ),
    "non-integer": (GOOD.replace("600", "600.5"), "input_length must be an integer"),
    "string tokens": (GOOD.replace("600", '"many"'), "input_length must be an integer"),
    "negative": (GOOD.replace('"output_length": 5', '"output_length": -5'), ">= 1"),
    "zero input": (GOOD.replace("600", "0").replace("[0, 1]", "[]"), "input_length must be >= 1"),
    "zero output": (GOOD.replace('"output_length": 5', '"output_length": 0'), "output_length"),
    "hash length": (GOOD.replace("[0, 1]", "[0, 1, 2]"), "hash_ids has 3 ids"),
    "hash type": (GOOD.replace("[0, 1]", '[0, "x"]'), "hash_ids must be a list of integers"),
    "hash repeats": (GOOD.replace("[0, 1]", "[1, 1]"), "hash_ids repeats an id"),
    "huge tokens": (GOOD.replace("600", "10" * 12), "input_length must be <= 100,000,000"),
    "negative timestamp": (
        GOOD.replace('"timestamp": 0', '"timestamp": -1'),
        "timestamp must be >= 0",
    ),
    "bad timestamp": (GOOD.replace('"timestamp": 0', '"timestamp": "noon"'), "timestamp must be"),
    "bad delay": (GOOD.replace("}", ', "delay": -3}'), "delay must be >= 0"),
}


@pytest.mark.parametrize("case", sorted(MOONCAKE_BAD))
def test_mooncake_malformed_line_names_file_and_line(tmp_path: Path, case: str) -> None:
    bad, what = MOONCAKE_BAD[case]
    path = _write(tmp_path, "t.jsonl", f"{GOOD}\n\n{GOOD}\n{bad}\n{GOOD}\n")
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:4: ")
    assert what in message
    assert "\n" not in message


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_GOOD = "2023-11-16 18:15:46.6805900,374,44\n"
AZURE_BAD = {
    "bad timestamp": ("2023-11-16 25:15:46.68,374,44", "TIMESTAMP"),
    "garbage timestamp": ("yesterday,374,44", "TIMESTAMP"),
    "too many digits": ("2023-11-16 18:15:46.6805900123,374,44", "TIMESTAMP"),
    "missing field": ("2023-11-16 18:15:46.6805900,374", "expected 3 fields"),
    "non-integer": ("2023-11-16 18:15:46.6805900,37.4,44", "ContextTokens must be an integer"),
    "negative": ("2023-11-16 18:15:46.6805900,374,-4", "GeneratedTokens must be >= 1"),
}


@pytest.mark.parametrize("case", sorted(AZURE_BAD))
def test_azure_malformed_line_names_file_and_line(tmp_path: Path, case: str) -> None:
    bad, what = AZURE_BAD[case]
    path = _write(tmp_path, "a.csv", f"{AZURE_HEADER}{AZURE_GOOD}{bad}\n{AZURE_GOOD}")
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}:3: ")
    assert what in str(info.value)


GENERIC_BAD = {
    "negative arrival": ("-1,10,10,", "arrival_s must be >= 0"),
    "bad arrival": ("soon,10,10,", "arrival_s must be a number"),
    "nan arrival": ("nan,10,10,", "arrival_s must be a number"),
    "zero tokens": ("1,0,10,", "input_tokens must be >= 1"),
    "hash count": ("1,10,10,1|2", "hash_ids has 2 ids"),
    "hash text": ("1,10,10,a", "hash_ids must be integers"),
    "field count": ("1,10", "expected 4 fields"),
    "huge field": ("1,10,10," + "9" * 200_000, "malformed CSV: field larger than field limit"),
}


@pytest.mark.parametrize("case", sorted(GENERIC_BAD))
def test_generic_malformed_line_names_file_and_line(tmp_path: Path, case: str) -> None:
    bad, what = GENERIC_BAD[case]
    # leading blank lines count: the bad row is line 5 of the file
    text = f"\n\narrival_s,input_tokens,output_tokens,hash_ids\n0,10,10,\n{bad}\n"
    path = _write(tmp_path, "g.csv", text)
    with pytest.raises(WorkloadError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}:5: ")
    assert what in str(info.value)


def test_empty_and_unknown_files(tmp_path: Path) -> None:
    empty = _write(tmp_path, "empty.jsonl", "\n  \n")
    with pytest.raises(WorkloadError, match=r"empty\.jsonl:1: empty trace file"):
        load_trace(empty)
    header_only = _write(tmp_path, "h.csv", AZURE_HEADER)
    with pytest.raises(WorkloadError, match=r"h\.csv:1: .*no requests"):
        load_trace(header_only)
    unknown = _write(tmp_path, "u.csv", "\nwhen,prompt,answer\n1,2,3\n")
    with pytest.raises(WorkloadError) as info:
        load_trace(unknown)
    message = str(info.value)
    assert message.startswith(f"{unknown}:2: unknown trace format")
    for name in ("Mooncake JSONL", "Azure CSV", "generic CSV"):
        assert name in message
    with pytest.raises(WorkloadError, match="cannot read"):
        load_trace(tmp_path / "absent.jsonl")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(WorkloadError, match="not UTF-8 text"):
        load_trace(binary)


def test_zero_output_clamped_on_request(tmp_path: Path) -> None:
    path = _write(tmp_path, "z.csv", f"{AZURE_HEADER}{AZURE_GOOD}2023-11-16 18:15:47,10,0\n")
    with pytest.raises(WorkloadError, match=r"z\.csv:3: GeneratedTokens must be >= 1"):
        load_trace(path)
    with pytest.warns(UserWarning, match="1 requests with 0 output tokens clamped to 1"):
        requests = load_trace(path, clamp_zero_output=True)
    assert requests[1].output_tokens == 1
    assert requests[1].arrival_s == pytest.approx(0.31941)


# --- real traces ------------------------------------------------------------------------------

REAL_TRACES = {
    # file: (requests, span minutes, mean input, mean output) from the traces README
    "mooncake/conversation_trace.jsonl": (12_031, 58.9, 12_035, 343),
    "mooncake/synthetic_trace.jsonl": (3_993, 17.0, 15_325, 149),
    "azure2023/AzureLLMInferenceTrace_conv.csv": (19_366, 58.4, 1_155, 211),
}


@pytest.mark.traces
@pytest.mark.parametrize("name", sorted(REAL_TRACES))
def test_real_trace_matches_readme(name: str) -> None:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"real trace {path} absent (../shared/data/traces not mounted)")
    count, span_min, mean_in, mean_out = REAL_TRACES[name]
    requests = load_trace(path)  # (its speed: benchmarks/sim_speed.py prints the load time)
    assert len(requests) == count
    _check_structure(requests)
    arrivals = np.array([r.arrival_s for r in requests])
    assert np.all(np.diff(arrivals) >= 0)
    assert (arrivals[-1] - arrivals[0]) / 60 == pytest.approx(span_min, abs=0.05)
    assert np.mean([r.input_tokens for r in requests]) == pytest.approx(mean_in, abs=0.5)
    assert np.mean([r.output_tokens for r in requests]) == pytest.approx(mean_out, abs=0.5)
    if name.startswith("mooncake"):
        assert all(len(r.block_hashes) == -(-r.input_tokens // 512) for r in requests)
    if name.startswith("mooncake/conversation"):
        assert all(r.block_hashes[0] == 0 for r in requests)
