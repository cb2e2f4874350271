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
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from dynosim.errors import WorkloadError
from dynosim.types import Request
from dynosim.workload.azure import read_azure_fast
from dynosim.workload.columns import RequestColumns, RowColumns, link
from dynosim.workload.limits import MAX_REQUESTS, MAX_TIME_S, MAX_TRACE_BYTES, REQUESTS_WHY
from dynosim.workload.mooncake import CHUNK_BYTES, read_mooncake
from dynosim.workload.trace_cache import cached_columns
from dynosim.workload.trace_fields import FieldReader, azure_ns
from dynosim.workload.transforms import head
from dynosim.workload.transforms import speedup as speed_up

__all__ = ["Workload", "load_trace", "load_trace_columns", "load_trace_workload"]

ACCEPTED_FORMATS = (
    "Mooncake JSONL (one object a line: timestamp, input_length, output_length, hash_ids), "
    "Azure CSV (header TIMESTAMP,ContextTokens,GeneratedTokens), "
    "generic CSV (header arrival_s,input_tokens,output_tokens[,session_id,delay_s,hash_ids])"
)
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_GENERIC_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")
_GENERIC_OPTIONAL = ("session_id", "delay_s", "hash_ids")


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


def _read_csv(
    reader: FieldReader,
    lines: Iterable[str],
    header: list[str],
    azure: bool,
    first: int,
    rows: RowColumns,
) -> None:
    """Read Azure or generic CSV rows into ``rows`` (``lines`` from the header, at ``first``)."""
    names = _AZURE_COLUMNS if azure else _GENERIC_COLUMNS
    time_col, input_col, output_col = (header.index(name) for name in names)
    optional = {name: header.index(name) for name in _GENERIC_OPTIONAL if name in header}
    stamps_ns: list[int] = []
    line_of: list[int] = []
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
            ns = azure_ns(fields[time_col])
            if ns is None:
                raise reader.error(
                    number, f"TIMESTAMP {fields[time_col]!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'"
                )
            stamps_ns.append(ns)
            line_of.append(number)
        else:
            timestamp_s = reader.seconds(number, "arrival_s", fields[time_col], 1.0)
        delay = cell.get("delay_s", "") if not azure else ""
        rows.add_row(
            timestamp_s,
            input_tokens,
            reader.tokens(number, header[output_col], fields[output_col], output=True),
            ids,
            (cell.get("session_id") or None) if not azure else None,
            reader.seconds(number, "delay_s", delay, 1.0) if delay else 0.0,
        )
        if rows.rows > MAX_REQUESTS:
            raise WorkloadError(f"{reader.path}: trace too long; allowed: {REQUESTS_WHY}")
    if stamps_ns:  # Azure: exact integer nanoseconds relative to the earliest row
        start = min(stamps_ns)
        seconds = [(ns - start) / 1e9 for ns in stamps_ns]
        for line, value in zip(line_of, seconds, strict=True):
            if not value < MAX_TIME_S:
                raise reader.error(
                    line,
                    f"TIMESTAMP is {value:.3g} s after the trace's first; allowed: "
                    f"less than {MAX_TIME_S:g} s (about 31.7 years)",
                )
        rows.set_timestamps(np.array(seconds, dtype=np.float64))


def _chunks(file: TextIO) -> Iterator[list[str]]:
    """The file's lines, about :data:`CHUNK_BYTES` at a time."""
    while chunk := file.readlines(CHUNK_BYTES):
        yield chunk


def load_trace_columns(path: str | Path, *, clamp_zero_output: bool = False) -> RequestColumns:
    """Read a trace file as columns (see :func:`load_trace`); the file is streamed.

    Raises:
        WorkloadError: As :func:`load_trace`.
    """
    return _load(Path(path), clamp_zero_output, stacklevel=3)


def _load(path: Path, clamp_zero_output: bool, stacklevel: int) -> RequestColumns:
    """:func:`load_trace_columns`; the clamping warning points ``stacklevel`` frames up.

    The columns come from the parsed-trace cache (:mod:`~dynosim.workload.trace_cache`) when it
    holds this content, else from :func:`_parse`.
    """
    try:
        size = path.stat().st_size
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise WorkloadError(f"{path}: cannot read trace: {exc}") from None
    if size > MAX_TRACE_BYTES:
        raise WorkloadError(
            f"{path}: trace of {size / 2**30:.1f} GiB; allowed: at most "
            f"{MAX_TRACE_BYTES / 2**30:g} GiB"
        )
    columns, clamped = cached_columns(
        path, clamp_zero_output, lambda: _parse(path, clamp_zero_output)
    )
    if clamped:
        warnings.warn(
            f"{path}: {clamped} requests with 0 output tokens clamped to 1",
            UserWarning,
            stacklevel=stacklevel,
        )
    return columns


def _parse(path: Path, clamp_zero_output: bool) -> tuple[RequestColumns, int]:
    """Read trace ``path`` into columns; also the count of output lengths clamped to 1."""
    reader = FieldReader(path, clamp_zero_output=clamp_zero_output)
    try:
        with path.open(encoding="utf-8-sig") as file:
            first, rows = _read(reader, file)
    except WorkloadError:  # a ValueError too
        raise
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: cannot read trace: not UTF-8 text") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise WorkloadError(f"{path}: cannot read trace: {exc}") from None
    if not rows.rows:
        raise reader.error(first + 1, "trace has a header but no requests")
    return link(rows), reader.clamped


def _read(reader: FieldReader, file: TextIO, *, fast: bool = True) -> tuple[int, RowColumns]:
    """Detect the format from the first non-blank line and read every row.

    An Azure trace is read by :func:`~dynosim.workload.azure.read_azure_fast` if it can (with
    ``fast``), else again from the start line by line.

    Returns:
        The index of the first non-blank line (the CSV header's) and the rows.
    """
    rows = RowColumns()
    chunks = _chunks(file)
    seen: list[str] = []  # the lines up to the first non-blank one
    for chunk in chunks:
        seen.extend(chunk)
        if any(line.strip() for line in chunk):
            break
    first = next((i for i, line in enumerate(seen) if line.strip()), None)
    if first is None:
        raise reader.error(1, f"empty trace file; accepted formats: {ACCEPTED_FORMATS}")
    head_line = seen[first].strip()
    if head_line.startswith("{"):
        read_mooncake(reader, itertools.chain([seen], chunks), rows)
        return first, rows
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
    azure = all(name in header for name in _AZURE_COLUMNS)
    if not azure and not all(name in header for name in _GENERIC_COLUMNS):
        raise reader.error(first + 1, f"unknown trace format; accepted: {ACCEPTED_FORMATS}")
    if fast and header == list(_AZURE_COLUMNS):
        if read_azure_fast(itertools.chain([seen[first + 1 :]], chunks), rows):
            return first, rows
        file.seek(0)
        return _read(reader, file, fast=False)
    lines = itertools.chain(seen[first:], itertools.chain.from_iterable(chunks))
    _read_csv(reader, lines, header, azure, first, rows)
    return first, rows


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
    return _load(Path(path), clamp_zero_output, stacklevel=3).requests()


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
