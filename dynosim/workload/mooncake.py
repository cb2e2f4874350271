"""The Mooncake JSONL reader, streamed in chunks of lines.

Format (Mooncake's published traces, e.g. ``conversation_trace.jsonl``): one JSON object a line
with ``timestamp`` (ms), ``input_length``, ``output_length`` and ``hash_ids``; optional
``session_id`` and ``delay`` (ms).

Most files write every line in one shape, ``{"timestamp": T, "input_length": I,
"output_length": O, "hash_ids": [h, ...]}``. A chunk whose every line has that shape is read
with one regular-expression pass and numpy (the hash ids of the whole chunk parsed at once,
the checks vectorised); any other chunk -- other keys, key order or value types, a blank line,
or a value a check refuses -- is read line by line with :mod:`json` and
:class:`~dynosim.workload.trace_fields.FieldReader`, which accepts exactly what the fast path
accepts and raises the one-line ``FILE:LINE: what is wrong`` error for the rest. Both paths give
the same rows (``tests/unit/workload/test_trace_columns.py`` compares them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from dynosim.errors import WorkloadError
from dynosim.types import HASH_BLOCK_TOKENS
from dynosim.workload.columns import RowColumns
from dynosim.workload.limits import MAX_REQUESTS, MAX_TIME_S, MAX_TOKENS, REQUESTS_WHY
from dynosim.workload.trace_fields import FieldReader, json_line

__all__ = ["read_mooncake"]

CHUNK_BYTES = 4 << 20
"""Lines are read and parsed about this many bytes at a time (memory stays bounded)."""

_W = r"[ \t]*"
_FIELD = _W + r'"{}"' + _W + ":" + _W + "({})" + _W
_LINE = re.compile(
    r"^"
    + _W
    + r"\{"
    + ",".join(
        _FIELD.format(name, value)
        for name, value in (
            ("timestamp", "0|[1-9][0-9]{0,15}"),
            ("input_length", "[1-9][0-9]{0,15}"),
            ("output_length", "[1-9][0-9]{0,15}"),
            ("hash_ids", r"\[[-0-9, \t]*\]"),
        )
    )
    + r"\}"
    + r"[ \t\r]*$",
    re.MULTILINE,
)
"""The common line shape; the hash list's content is checked afterwards (:func:`_ids`)."""

_MAX_DIGITS = 18
"""A hash id of at most 18 digits fits a 64-bit integer (longer ones take the slow path)."""


def read_mooncake(reader: FieldReader, lines: Iterable[list[str]], rows: RowColumns) -> None:
    """Read the file's lines, a chunk (a list of lines) at a time, into ``rows``.

    Args:
        reader: The file's field checks (it names the file in errors).
        lines: The file's lines, a chunk at a time, from its first line.
        rows: Where the rows go.

    Raises:
        WorkloadError: A malformed line (the first one in the file).
    """
    first = 1
    for chunk in lines:
        if not _fast_chunk(chunk, rows):
            for number, text in enumerate(chunk, start=first):
                _slow_line(reader, number, text, rows)
        first += len(chunk)
        if rows.rows > MAX_REQUESTS:
            raise WorkloadError(f"{reader.path}: trace too long; allowed: {REQUESTS_WHY}")


def _fast_chunk(chunk: list[str], rows: RowColumns) -> bool:
    """Read a chunk whose every line has the common shape and passes every check."""
    text = "".join(chunk)
    found = _LINE.findall(text)
    if len(found) != len(chunk):  # a line of another shape, or a blank one
        return False
    stamps, ins, outs, lists = zip(*found, strict=True)
    ms = np.array(stamps, dtype=np.int64)
    input_tokens = np.array(ins, dtype=np.int64)
    output_tokens = np.array(outs, dtype=np.int64)
    parsed = _ids(lists)
    if parsed is None:
        return False
    counts, hashes = parsed
    if not (
        ms.max() < MAX_TIME_S * 1000.0
        and input_tokens.max() <= MAX_TOKENS
        and output_tokens.max() <= MAX_TOKENS
        and np.array_equal(counts, -(-input_tokens // HASH_BLOCK_TOKENS))
        and _distinct(counts, hashes)
    ):
        return False
    rows.add(ms.astype(np.float64) / 1000.0, input_tokens, output_tokens, counts, hashes)
    return True


def _ids(lists: tuple[str, ...]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """Each line's hash ids (``[...]`` texts): counts and the flat ids, or None if malformed.

    JSON integers only: no empty list, empty element, leading zero, lone or spaced minus sign,
    or id of more than 18 digits (:func:`numpy.fromstring` is laxer: it reads ``-`` as 0 and
    clamps a long id); ``-0`` is 0, as :mod:`json` reads it.
    """
    inner = [s[1:-1] for s in lists]
    if not all(inner):  # [] (no prompt has no block) or a list of blanks: the slow path
        return None
    joined = ",".join(inner)
    try:
        hashes = np.fromstring(joined, dtype=np.int64, sep=",")
    except ValueError:  # "1 2", "1,,2", "1-2", "--1": not a list of integers
        return None
    counts = np.fromiter((s.count(",") + 1 for s in inner), dtype=np.int64, count=len(inner))
    if hashes.size != counts.sum():
        return None
    chars = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    digit = (chars >= ord("0")) & (chars <= ord("9"))
    edges = np.flatnonzero(np.diff(np.concatenate(([False], digit, [False])).view(np.int8)))
    starts, ends = edges[::2], edges[1::2]  # runs of digits: one per id
    if starts.size != hashes.size or (ends - starts).max() > _MAX_DIGITS:
        return None
    after = np.flatnonzero(chars == ord("-")) + 1  # numpy reads "-" as 0, "- 3" as -3
    if after.size and (after[-1] >= chars.size or not digit[after].all()):
        return None
    leading = chars[starts] == ord("0")
    if np.any(leading & (ends - starts > 1)):  # 007 is not a JSON integer
        return None
    return counts, hashes


def _distinct(counts: npt.NDArray[np.int64], hashes: npt.NDArray[np.int64]) -> bool:
    """No row repeats an id (rows whose ids do not ascend are checked one by one)."""
    if hashes.size < 2:
        return True
    offsets = np.concatenate(([0], np.cumsum(counts)))
    falls = np.flatnonzero(hashes[1:] <= hashes[:-1])  # pair (i, i+1) not ascending
    if not falls.size:
        return True
    row = np.searchsorted(offsets, falls, side="right") - 1
    inside = falls + 1 < offsets[row + 1]  # both ids in the same row
    for r in sorted(set(row[inside].tolist())):  # not np.unique: it imports numpy.ma (~20 ms)
        ids = np.sort(hashes[offsets[r] : offsets[r + 1]])
        if np.any(ids[1:] == ids[:-1]):
            return False
    return True


def _slow_line(reader: FieldReader, number: int, text: str, rows: RowColumns) -> None:
    """Read one line with :mod:`json`, checking each field in turn."""
    if not text.strip():
        return
    obj = json_line(reader, number, text)
    if not isinstance(obj, dict):
        raise reader.error(number, f"expected a JSON object, got {type(obj).__name__}")
    for key in ("input_length", "output_length", "hash_ids"):
        if key not in obj:
            raise reader.error(number, f"missing field {key!r}")
    session = obj.get("session_id")
    if session is not None and (isinstance(session, bool) or not isinstance(session, int | str)):
        raise reader.error(number, f"session_id must be an integer or string, got {session!r}")
    timestamp = obj.get("timestamp")
    if timestamp is None and session is None:
        raise reader.error(number, "missing field 'timestamp'")
    input_tokens = reader.tokens(number, "input_length", obj["input_length"])
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not set(map(type, ids)) <= {int}:
        raise reader.error(number, "hash_ids must be a list of integers")
    rows.add_row(
        0.0 if timestamp is None else reader.seconds(number, "timestamp", timestamp, 1000.0),
        input_tokens,
        reader.tokens(number, "output_length", obj["output_length"], output=True),
        reader.hashes(number, tuple(ids), input_tokens),
        session,
        reader.seconds(number, "delay", obj.get("delay", 0), 1000.0),
    )
