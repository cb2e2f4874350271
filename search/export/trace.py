"""A workload as the Mooncake-trace JSONL that AIPerf's trace replay reads.

AIPerf (``ai-dynamo/aiperf`` ``src/aiperf/dataset/loader/models.py``, ``MooncakeTrace``;
``mooncake_trace.py``; ``docs/benchmark_modes/trace_replay.md``) reads one JSON object a line:
``input_length`` and ``output_length`` (tokens), ``hash_ids`` (one id per 512-token block of
the prompt, Mooncake's block size, which is dynosim's ``HASH_BLOCK_TOKENS``), ``timestamp``
(milliseconds from the start, for ``--fixed-schedule``), and for a conversation ``session_id``
with ``delay`` (milliseconds after the previous turn of the session completes; a row has a
timestamp or a delay, not both). Rows of one session are sent one after another.

dynosim's requests map one to one: a request that follows another (``after_id``: the next turn
of a session or of a closed-loop client) becomes a ``delay`` row of its chain's session; the
first request of a chain keeps its arrival as ``timestamp``. A request without prefix data
gets block ids no other request has (AIPerf then sends a prompt nothing else shares).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from dynosim.types import HASH_BLOCK_TOKENS, Request


def mooncake_rows(requests: Sequence[Request]) -> Iterator[dict[str, object]]:
    """One AIPerf ``mooncake_trace`` row per request, in workload order."""
    root: dict[int, int] = {}
    for r in requests:
        root[r.id] = r.id if r.after_id is None else root[r.after_id]
    chained = {root[r.id] for r in requests if r.after_id is not None}
    fresh = 1 + max((h for r in requests for h in r.block_hashes), default=-1)
    for r in requests:
        row: dict[str, object] = {}
        if root[r.id] in chained:
            row["session_id"] = f"s{root[r.id]}"
        if r.after_id is None:
            row["timestamp"] = _ms(r.arrival_s)
        else:
            row["delay"] = _ms(r.delay_s)
        row["input_length"] = r.input_tokens
        row["output_length"] = r.output_tokens
        if r.block_hashes:
            row["hash_ids"] = list(r.block_hashes)
        else:  # no prefix data: blocks no other request shares (so nothing is cached)
            blocks = -(-r.input_tokens // HASH_BLOCK_TOKENS)
            row["hash_ids"] = list(range(fresh, fresh + blocks))
            fresh += blocks
        yield row


def mooncake_jsonl(requests: Sequence[Request]) -> str:
    """The trace file's text."""
    return "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in mooncake_rows(requests))


def _ms(seconds: float) -> float | int:
    ms = round(seconds * 1000.0, 3)  # AIPerf schedules to the millisecond
    return int(ms) if ms == int(ms) else ms
