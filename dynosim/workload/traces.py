"""Readers for request traces: Mooncake JSONL, Azure CSV and a generic CSV.

The format is chosen from the file's content, never from its extension:

* a first line starting with ``{`` is Mooncake JSONL (``timestamp`` ms, ``input_length``,
  ``output_length``, ``hash_ids``; optional ``session_id`` and ``delay`` ms);
* a CSV header with ``TIMESTAMP,ContextTokens,GeneratedTokens`` is the Azure LLM inference trace;
* a CSV header with ``arrival_s,input_tokens,output_tokens`` (optional ``session_id``,
  ``delay_s`` and ``hash_ids``, ids separated by spaces or ``|``) is the generic format.

Every malformed line raises :class:`~dynosim.errors.WorkloadError` with the one-line message
``FILE:LINE: what is wrong``. Zero output tokens are rejected unless ``clamp_zero_output`` is
set, in which case they become 1 and a :class:`UserWarning` reports how many were clamped.

Sessions (Mooncake and generic CSV): the first turn of a session is sent at its timestamp; each
later turn has ``after_id`` = the previous turn of the same session (in file order),
``delay_s`` = its ``delay`` (default 0) and ``arrival_s`` = its own timestamp if present, else 0.
Session ids are renumbered 0..k-1 in order of first appearance. Requests keep the file order
when timestamps never decrease; otherwise they are sorted stably by timestamp, a later turn never
moving before its previous turn. Ids are the positions after sorting.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import warnings
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from dynosim.errors import WorkloadError
from dynosim.types import HASH_BLOCK_TOKENS, Request
from dynosim.workload.limits import MAX_REQUESTS, MAX_TIME_S, MAX_TRACE_BYTES, REQUESTS_WHY
from dynosim.workload.transforms import head
from dynosim.workload.transforms import speedup as speed_up

__all__ = ["Workload", "load_trace", "load_trace_workload"]

ACCEPTED_FORMATS = (
    "Mooncake JSONL (one object a line: timestamp, input_length, output_length, hash_ids), "
    "Azure CSV (header TIMESTAMP,ContextTokens,GeneratedTokens), "
    "generic CSV (header arrival_s,input_tokens,output_tokens[,session_id,delay_s,hash_ids])"
)
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_GENERIC_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")
_GENERIC_OPTIONAL = ("session_id", "delay_s", "hash_ids")


MAX_TOKENS = 100_000_000
"""Largest token count a trace line may give (far beyond any context window)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Requests ready to simulate.

    Attributes:
        requests: The requests, ids 0..n-1 in order of position.
        warmup_requests: How many leading requests are warm-up (excluded from metrics).
        name: Human-readable name (the file's stem, or the spec's ``name``).
    """

    requests: tuple[Request, ...]
    warmup_requests: int = 0
    name: str = "workload"


@dataclass(slots=True)
class _Row:
    """One parsed trace line before sorting and session linking."""

    line: int
    timestamp_s: float | None
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...]
    session: object
    delay_s: float


class _Reader:
    """Shared validation helpers; knows the file name and counts clamped outputs."""

    def __init__(self, path: Path, *, clamp_zero_output: bool) -> None:
        self.path = path
        self.clamp_zero_output = clamp_zero_output
        self.clamped = 0

    def error(self, line: int, what: str) -> WorkloadError:
        what = " ".join(what.split())  # always one line
        return WorkloadError(f"{self.path}:{line}: {what}")

    def tokens(self, line: int, name: str, value: object, *, output: bool = False) -> int:
        """Validate a token count: an integer >= 1 (or 0 output clamped to 1)."""
        if type(value) is int and 1 <= value <= MAX_TOKENS:  # the common case, fast
            return value
        number = _integral(value)
        if number is None:
            raise self.error(line, f"{name} must be an integer, got {value!r}")
        if number == 0 and output and self.clamp_zero_output:
            self.clamped += 1
            return 1
        if number < 1:
            raise self.error(line, f"{name} must be >= 1, got {number}")
        if number > MAX_TOKENS:
            raise self.error(line, f"{name} must be <= {MAX_TOKENS:,}, got {number}")
        return number

    def seconds(self, line: int, name: str, value: object, scale: float) -> float:
        """Validate a finite, non-negative time and convert it to seconds."""
        if type(value) is int and 0 <= value < MAX_TIME_S * scale:  # the common case, fast
            return float(value) / scale
        number = _number(value)
        if number is None or not math.isfinite(number):
            raise self.error(line, f"{name} must be a number, got {value!r}")
        if number < 0:
            raise self.error(line, f"{name} must be >= 0, got {value!r}")
        if not number / scale < MAX_TIME_S:  # e.g. epoch nanoseconds in a millisecond field
            raise self.error(
                line,
                f"{name} must be < {MAX_TIME_S * scale:g} {'ms' if scale == 1000.0 else 's'} "
                "(about 31.7 years from the trace's start; absolute epoch times are not "
                f"supported), got {value!r}",
            )
        return number / scale

    def hashes(self, line: int, ids: tuple[int, ...], input_tokens: int) -> tuple[int, ...]:
        expected = -(-input_tokens // HASH_BLOCK_TOKENS)
        if len(set(ids)) != len(ids):
            raise self.error(line, "hash_ids repeats an id (each block of a prompt is distinct)")
        if len(ids) != expected:
            raise self.error(
                line,
                f"hash_ids has {len(ids)} ids but input length {input_tokens} needs "
                f"ceil({input_tokens}/{HASH_BLOCK_TOKENS}) = {expected}",
            )
        return ids


def _integral(value: object) -> int | None:
    """Return ``value`` as an int if it is an integer (int, integral float or such a string)."""
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            number = _number(text)
            if number is not None and math.isfinite(number) and number.is_integer():
                return int(number)
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an integer beyond any float
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


_JSON_SPACE = " \t\n\r"  # what JSON counts as whitespace (str.strip() strips more)
_DECODER = json.JSONDecoder()


def _json_line(reader: _Reader, number: int, text: str) -> Any:
    """``json.loads(text)``, through ``raw_decode`` alone when the line is valid.

    ``raw_decode`` skips ``json.loads``'s whitespace regular expressions; on any failure
    ``json.loads`` runs again to raise its own error.
    """
    body = text.strip(_JSON_SPACE)
    try:
        obj, end = _DECODER.raw_decode(body)
        if end == len(body):
            return obj
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        pass
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise reader.error(number, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError as exc:  # an integer beyond Python's 4,300-digit conversion limit
        raise reader.error(number, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise reader.error(number, "invalid JSON: nested too deeply") from None


def _read_mooncake(reader: _Reader, lines: list[str]) -> list[_Row]:
    rows: list[_Row] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        obj = _json_line(reader, number, text)
        if not isinstance(obj, dict):
            raise reader.error(number, f"expected a JSON object, got {type(obj).__name__}")
        for key in ("input_length", "output_length", "hash_ids"):
            if key not in obj:
                raise reader.error(number, f"missing field {key!r}")
        session = obj.get("session_id")
        if session is not None and (
            isinstance(session, bool) or not isinstance(session, int | str)
        ):
            raise reader.error(number, f"session_id must be an integer or string, got {session!r}")
        timestamp = obj.get("timestamp")
        if timestamp is None and session is None:
            raise reader.error(number, "missing field 'timestamp'")
        input_tokens = reader.tokens(number, "input_length", obj["input_length"])
        ids = obj["hash_ids"]
        if not isinstance(ids, list) or not set(map(type, ids)) <= {int}:
            raise reader.error(number, "hash_ids must be a list of integers")
        rows.append(
            _Row(
                line=number,
                timestamp_s=None
                if timestamp is None
                else reader.seconds(number, "timestamp", timestamp, 1000.0),
                input_tokens=input_tokens,
                output_tokens=reader.tokens(
                    number, "output_length", obj["output_length"], output=True
                ),
                block_hashes=reader.hashes(number, tuple(ids), input_tokens),
                session=session,
                delay_s=reader.seconds(number, "delay", obj.get("delay", 0), 1000.0),
            )
        )
    return rows


def _azure_ns(text: str) -> int | None:
    """Parse ``YYYY-MM-DD HH:MM:SS[.fffffff]`` exactly into integer nanoseconds."""
    date_text, sep, time_text = text.strip().partition(" ")
    if not sep:
        date_text, sep, time_text = text.strip().partition("T")
    try:
        day = date.fromisoformat(date_text).toordinal()
        hh, mm, ss = time_text.split(":")
        whole, _, frac = ss.partition(".")
        if len(frac) > 9 or not frac.isascii() or not (frac.isdigit() or not frac):
            return None
        if not (hh.isdigit() and mm.isdigit() and whole.isdigit()):
            return None
        h, m, s = int(hh), int(mm), int(whole)
    except ValueError:
        return None
    if h > 23 or m > 59 or s > 60:  # 60: leap second
        return None
    return ((day * 86_400 + h * 3_600 + m * 60 + s) * 10**9) + int(frac.ljust(9, "0"))


def _read_csv(
    reader: _Reader, lines: list[str], header: list[str], azure: bool, first: int
) -> list[_Row]:
    """Read Azure or generic CSV rows (``lines[0]`` is the header, line ``first + 1``)."""
    names = _AZURE_COLUMNS if azure else _GENERIC_COLUMNS
    time_col, input_col, output_col = (header.index(name) for name in names)
    optional = {name: header.index(name) for name in _GENERIC_OPTIONAL if name in header}
    rows: list[_Row] = []
    stamps_ns: list[int] = []
    records = csv.reader(lines)
    next(records)
    while True:
        try:
            fields = next(records)
        except StopIteration:
            break
        except csv.Error as exc:
            raise reader.error(records.line_num + first, f"malformed CSV: {exc}") from None
        number = records.line_num + first
        if not "".join(fields).strip():
            continue
        if len(fields) != len(header):
            raise reader.error(
                number, f"expected {len(header)} fields ({','.join(header)}), got {len(fields)}"
            )
        cell = {name: fields[col].strip() for name, col in optional.items()}
        input_tokens = reader.tokens(number, header[input_col], fields[input_col])
        ids: tuple[int, ...] = ()
        if cell.get("hash_ids") and not azure:
            try:
                ids = tuple(int(h) for h in cell["hash_ids"].replace("|", " ").split())
            except ValueError:
                raise reader.error(
                    number, "hash_ids must be integers separated by spaces or '|'"
                ) from None
            reader.hashes(number, ids, input_tokens)
        timestamp_s = 0.0
        if azure:
            ns = _azure_ns(fields[time_col])
            if ns is None:
                raise reader.error(
                    number, f"TIMESTAMP {fields[time_col]!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'"
                )
            stamps_ns.append(ns)
        else:
            timestamp_s = reader.seconds(number, "arrival_s", fields[time_col], 1.0)
        delay = cell.get("delay_s", "") if not azure else ""
        rows.append(
            _Row(
                line=number,
                timestamp_s=timestamp_s,
                input_tokens=input_tokens,
                output_tokens=reader.tokens(
                    number, header[output_col], fields[output_col], output=True
                ),
                block_hashes=ids,
                session=(cell.get("session_id") or None) if not azure else None,
                delay_s=reader.seconds(number, "delay_s", delay, 1.0) if delay else 0.0,
            )
        )
    if stamps_ns:  # Azure: exact integer nanoseconds relative to the earliest row
        start = min(stamps_ns)
        for row, ns in zip(rows, stamps_ns, strict=True):
            row.timestamp_s = (ns - start) / 1e9
            if not row.timestamp_s < MAX_TIME_S:
                raise reader.error(
                    row.line,
                    f"TIMESTAMP is {row.timestamp_s:.3g} s after the trace's first; allowed: "
                    f"less than {MAX_TIME_S:g} s (about 31.7 years)",
                )
    return rows


def _link(rows: list[_Row]) -> list[Request]:
    """Order rows by timestamp (stably, keeping turns in order) and build linked requests."""
    last_key: dict[object, float] = {}
    keys: list[float] = []
    for row in rows:
        previous = last_key.get(row.session) if row.session is not None else None
        key = row.timestamp_s if row.timestamp_s is not None else 0.0
        if previous is not None:
            key = max(key, previous)
        if row.session is not None:
            last_key[row.session] = key
        keys.append(key)
    order: range | list[int] = range(len(rows))
    if any(b < a for a, b in itertools.pairwise(keys)):
        order = sorted(range(len(rows)), key=keys.__getitem__)
    session_index: dict[object, int] = {}
    last_turn: dict[object, int] = {}
    requests: list[Request] = []
    for new_id, old in enumerate(order):
        row = rows[old]
        after: int | None = None
        sid: int | None = None
        if row.session is not None:
            sid = session_index.setdefault(row.session, len(session_index))
            after = last_turn.get(row.session)
            last_turn[row.session] = new_id
        requests.append(
            Request(
                id=new_id,
                arrival_s=row.timestamp_s if row.timestamp_s is not None else 0.0,
                input_tokens=row.input_tokens,
                output_tokens=row.output_tokens,
                block_hashes=row.block_hashes,
                session_id=sid,
                after_id=after,
                delay_s=row.delay_s if after is not None else 0.0,
            )
        )
    return requests


def load_trace(path: str | Path, *, clamp_zero_output: bool = False) -> list[Request]:
    """Read a trace file, detecting its format from its content.

    Args:
        path: A Mooncake JSONL, Azure CSV or generic CSV file.
        clamp_zero_output: Turn output lengths of 0 into 1 (with a warning giving the count)
            instead of rejecting the line.

    Returns:
        The requests, ids 0..n-1 in order of position, ``after_id < id``.

    Raises:
        WorkloadError: The file cannot be read, is empty, has an unknown format or a malformed
            line (message ``FILE:LINE: what is wrong``).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise WorkloadError(
                f"{path}: trace of {size / 2**30:.1f} GiB; allowed: at most "
                f"{MAX_TRACE_BYTES / 2**30:g} GiB (it is read into memory whole)"
            )
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: cannot read trace: not UTF-8 text") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise WorkloadError(f"{path}: cannot read trace: {exc}") from None
    lines = text.splitlines()
    if len(lines) > MAX_REQUESTS + 1 and sum(1 for t in lines if t.strip()) > MAX_REQUESTS + 1:
        raise WorkloadError(f"{path}: trace too long; allowed: {REQUESTS_WHY}")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise WorkloadError(f"{path}:1: empty trace file; accepted formats: {ACCEPTED_FORMATS}")
    reader = _Reader(path, clamp_zero_output=clamp_zero_output)
    head_line = lines[first].strip()
    if head_line.startswith("{"):
        rows = _read_mooncake(reader, lines)
    else:
        try:
            header = [name.strip() for name in next(csv.reader([head_line]))]
        except csv.Error as exc:
            raise reader.error(first + 1, f"malformed CSV header: {exc}") from None
        repeated = sorted({name for name in header if header.count(name) > 1})
        known = any(all(n in header for n in c) for c in (_AZURE_COLUMNS, _GENERIC_COLUMNS))
        if repeated and known:
            raise reader.error(
                first + 1, f"column {repeated[0]!r} appears twice; allowed: distinct columns"
            )
        body = lines[first:]
        if all(name in header for name in _AZURE_COLUMNS):
            rows = _read_csv(reader, body, header, azure=True, first=first)
        elif all(name in header for name in _GENERIC_COLUMNS):
            rows = _read_csv(reader, body, header, azure=False, first=first)
        else:
            raise reader.error(first + 1, f"unknown trace format; accepted: {ACCEPTED_FORMATS}")
    if not rows:
        raise reader.error(first + 1, "trace has a header but no requests")
    if reader.clamped:
        warnings.warn(
            f"{path}: {reader.clamped} requests with 0 output tokens clamped to 1",
            UserWarning,
            stacklevel=2,
        )
    return _link(rows)


def load_trace_workload(
    path: str | Path, speedup: float = 1.0, max_requests: int | None = None
) -> Workload:
    """Read a trace as a :class:`Workload`, optionally truncated and sped up.

    Args:
        path: The trace file (any format :func:`load_trace` accepts).
        speedup: Divide arrival times and delays by this factor (> 0).
        max_requests: Keep only the first this many requests.

    Returns:
        The workload, named after the file's stem, without warm-up requests.
    """
    requests = load_trace(path)
    if max_requests is not None:
        requests = head(requests, max_requests)
    if speedup != 1.0:
        requests = speed_up(requests, speedup)
    return Workload(requests=tuple(requests), warmup_requests=0, name=Path(path).stem)
