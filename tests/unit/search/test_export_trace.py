"""``--aiperf-trace``: the workload as AIPerf's Mooncake JSONL, read back unchanged."""

from __future__ import annotations

import json
from pathlib import Path

from dynosim.types import Request
from dynosim.workload import load_trace
from search.export.trace import mooncake_jsonl, mooncake_rows

REQUESTS = [
    Request(id=0, arrival_s=0.0, input_tokens=700, output_tokens=20, block_hashes=(1, 2)),
    Request(id=1, arrival_s=0.25, input_tokens=300, output_tokens=5, block_hashes=(1,),
            session_id=7),
    Request(id=2, arrival_s=1.5005, input_tokens=90, output_tokens=3),
    Request(id=3, arrival_s=0.25, input_tokens=600, output_tokens=8, block_hashes=(1, 9),
            session_id=7, after_id=1, delay_s=2.0),
]  # fmt: skip


def test_rows_are_aiperf_mooncake_rows() -> None:
    rows = list(mooncake_rows(REQUESTS))
    # hand-written: ms timestamps, a session's later turn has a delay and no timestamp
    assert rows == [
        {"timestamp": 0, "input_length": 700, "output_length": 20, "hash_ids": [1, 2]},
        {"session_id": "s1", "timestamp": 250, "input_length": 300, "output_length": 5,
         "hash_ids": [1]},
        {"timestamp": 1500.5, "input_length": 90, "output_length": 3, "hash_ids": [10]},
        {"session_id": "s1", "delay": 2000, "input_length": 600, "output_length": 8,
         "hash_ids": [1, 9]},
    ]  # fmt: skip
    for row in rows:  # AIPerf's MooncakeTrace: a timestamp or a delay, never both
        assert ("timestamp" in row) != ("delay" in row)


def test_written_trace_reads_back_as_the_same_requests(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    out.write_text(mooncake_jsonl(REQUESTS))
    assert all(json.loads(line) for line in out.read_text().splitlines())
    back = load_trace(out)

    def key(rs: list[Request]) -> list[tuple[object, ...]]:
        """Order-free; a follow-up by its parent's prompt and delay (its arrival is unused)."""
        size = {r.id: r.input_tokens for r in rs}
        return sorted((r.arrival_s if r.after_id is None else -1.0, r.input_tokens,
                       r.output_tokens, r.block_hashes or (10,), size.get(r.after_id or -1),
                       r.delay_s) for r in rs)  # fmt: skip

    assert key(back) == key(REQUESTS)
