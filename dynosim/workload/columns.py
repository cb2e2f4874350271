"""Requests as columns: the trace readers' output before it becomes ``Request`` objects.

A million-line trace read into one frozen :class:`~dynosim.types.Request` per line, each with a
tuple of hash ids, costs seconds and about 1 KB a request; the readers instead fill
:class:`RowColumns` (numpy arrays, the hash ids of every row in one flat array with offsets),
:func:`link` orders and links them into :class:`RequestColumns`, and only
:meth:`RequestColumns.requests` builds the objects the simulation takes.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

import numpy as np
import numpy.typing as npt

from dynosim.types import Request

__all__ = ["RequestColumns", "RowColumns", "gc_paused", "link"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of acyclic objects are made.

    Each collection of the oldest generation walks every live object; building a million
    requests (each with a tuple of hash ids) triggers many, about doubling the time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True, slots=True, eq=False)
class RequestColumns:
    """Requests ``0..n-1`` as columns; ``-1`` stands for "none" in ``session_id``/``after_id``.

    Attributes:
        arrival_s: Arrival times (seconds).
        input_tokens: Prompt lengths.
        output_tokens: Output lengths.
        hash_offsets: Request ``i``'s hash ids are ``hashes[hash_offsets[i]:hash_offsets[i+1]]``.
        hashes: Every request's prompt hash ids, one after another.
        session_id: Session of each request, or -1.
        after_id: The request each one follows, or -1.
        delay_s: Think time after ``after_id`` completes (0 without one).
    """

    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    hash_offsets: IntArray
    hashes: IntArray
    session_id: IntArray
    after_id: IntArray
    delay_s: FloatArray

    def __len__(self) -> int:
        return len(self.arrival_s)

    def requests(self) -> list[Request]:
        """The requests as objects (what :class:`~dynosim.simulation.Simulation` takes)."""
        with gc_paused():
            return self._requests()

    def _requests(self) -> list[Request]:
        hashes = self.hashes.tolist()
        offsets = self.hash_offsets.tolist()
        new = object.__new__
        (set_id, set_arrival, set_in, set_out, set_hashes, set_session, set_after, set_delay,
         set_warm) = _SETTERS  # fmt: skip
        out: list[Request] = []
        append = out.append
        for i, (arrival, ins, outs, sid, after, delay) in enumerate(
            zip(
                self.arrival_s.tolist(),
                self.input_tokens.tolist(),
                self.output_tokens.tolist(),
                self.session_id.tolist(),
                self.after_id.tolist(),
                self.delay_s.tolist(),
                strict=True,
            )
        ):
            r = new(Request)
            set_id(r, i)
            set_arrival(r, arrival)
            set_in(r, ins)
            set_out(r, outs)
            set_hashes(r, tuple(hashes[offsets[i] : offsets[i + 1]]))
            set_session(r, None if sid < 0 else sid)
            set_after(r, None if after < 0 else after)
            set_delay(r, delay)
            set_warm(r, False)  # a trace has no warm-up phase
            append(r)
        return out


_FIELDS = (
    "id",
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "block_hashes",
    "session_id",
    "after_id",
    "delay_s",
    "after_warmup",
)
if tuple(f.name for f in fields(Request)) != _FIELDS or hasattr(Request, "__post_init__"):
    raise TypeError("Request's fields changed: update columns._FIELDS and RequestColumns.requests")
_SETTERS = tuple(getattr(Request, name).__set__ for name in _FIELDS)
"""Request's slot setters, in :data:`_FIELDS` order: :meth:`RequestColumns.requests` fills the
slots directly, as the frozen dataclass's ``__init__`` does through ``object.__setattr__``,
without its keyword call: the 12,031 requests of the Mooncake conversation trace in 174 M
instructions instead of 294 M (callgrind). The check above keeps the two in step when a field
is added or moved."""


@dataclass(slots=True)
class RowColumns:
    """Parsed trace lines in file order, before sorting and session linking (a builder).

    Chunks of rows are appended as arrays (:meth:`add`) or row by row (:meth:`add_row`); a
    row without a timestamp (a later turn of a session) has timestamp 0.
    """

    timestamp_s: list[FloatArray] = field(default_factory=list)
    input_tokens: list[IntArray] = field(default_factory=list)
    output_tokens: list[IntArray] = field(default_factory=list)
    counts: list[IntArray] = field(default_factory=list)
    hashes: list[IntArray] = field(default_factory=list)
    delay_s: list[FloatArray] = field(default_factory=list)
    sessions: list[object] = field(default_factory=list)
    rows: int = 0
    _pending: list[tuple[float, int, int, tuple[int, ...], float]] = field(default_factory=list)

    def add(
        self,
        timestamp_s: FloatArray,
        input_tokens: IntArray,
        output_tokens: IntArray,
        counts: IntArray,
        hashes: IntArray,
    ) -> None:
        """Append rows without sessions or delays (``counts``: hash ids per row)."""
        self._flush()
        n = len(timestamp_s)
        self.timestamp_s.append(timestamp_s)
        self.input_tokens.append(input_tokens)
        self.output_tokens.append(output_tokens)
        self.counts.append(counts)
        self.hashes.append(hashes)
        self.delay_s.append(np.zeros(n))
        self.sessions.extend(itertools.repeat(None, n))
        self.rows += n

    def add_row(
        self,
        timestamp_s: float,
        input_tokens: int,
        output_tokens: int,
        hashes: tuple[int, ...],
        session: object,
        delay_s: float,
    ) -> None:
        """Append one row (the line-by-line readers)."""
        self._pending.append((timestamp_s, input_tokens, output_tokens, hashes, delay_s))
        self.sessions.append(session)
        self.rows += 1

    def _flush(self) -> None:
        rows = self._pending
        if not rows:
            return
        self.timestamp_s.append(np.array([r[0] for r in rows], dtype=np.float64))
        self.input_tokens.append(np.array([r[1] for r in rows], dtype=np.int64))
        self.output_tokens.append(np.array([r[2] for r in rows], dtype=np.int64))
        self.counts.append(np.array([len(r[3]) for r in rows], dtype=np.int64))
        flat = [h for r in rows for h in r[3]]
        self.hashes.append(np.array(flat, dtype=np.int64))
        self.delay_s.append(np.array([r[4] for r in rows], dtype=np.float64))
        self._pending = []

    def set_timestamps(self, timestamp_s: FloatArray) -> None:
        """Replace every row's timestamp (the Azure reader, once it knows the earliest)."""
        self._flush()
        self.timestamp_s = [timestamp_s]

    def column(self, name: str) -> npt.NDArray[np.generic]:
        """One column of every row so far, as one array."""
        self._flush()
        parts: list[npt.NDArray[np.generic]] = getattr(self, name)
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def link(rows: RowColumns) -> RequestColumns:
    """Order rows by timestamp (stably, keeping turns in order) and link sessions' turns.

    The first turn of a session is sent at its timestamp; each later turn follows the previous
    turn of its session (in file order) after its ``delay``. Session ids are renumbered 0..k-1
    in order of first appearance; ids are the positions after sorting.
    """
    stamps = rows.column("timestamp_s").astype(np.float64)
    counts = rows.column("counts").astype(np.int64)
    hashes = rows.column("hashes").astype(np.int64)
    delays = rows.column("delay_s").astype(np.float64)
    n = len(stamps)
    sessions = rows.sessions
    has_sessions = any(s is not None for s in sessions)
    keys = stamps
    if has_sessions:  # a later turn never sorts before its previous turn
        last_key: dict[object, float] = {}
        key_list = stamps.tolist()
        for i, session in enumerate(sessions):
            if session is not None:
                previous = last_key.get(session)
                if previous is not None and previous > key_list[i]:
                    key_list[i] = previous
                last_key[session] = key_list[i]
        keys = np.array(key_list, dtype=np.float64)
    sort = bool(n > 1 and np.any(keys[1:] < keys[:-1]))
    order = np.argsort(keys, kind="stable") if sort else np.arange(n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts[order], out=offsets[1:])
    if sort:
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        gather = np.repeat(starts[order] - offsets[:-1], counts[order])
        hashes = hashes[gather + np.arange(len(gather), dtype=np.int64)]
    session_id = np.full(n, -1, dtype=np.int64)
    after_id = np.full(n, -1, dtype=np.int64)
    if has_sessions:
        session_index: dict[object, int] = {}
        last_turn: dict[object, int] = {}
        for new_id, old in enumerate(order.tolist()):
            session = sessions[old]
            if session is not None:
                session_id[new_id] = session_index.setdefault(session, len(session_index))
                after_id[new_id] = last_turn.get(session, -1)
                last_turn[session] = new_id
    return RequestColumns(
        arrival_s=stamps[order],
        input_tokens=rows.column("input_tokens").astype(np.int64)[order],
        output_tokens=rows.column("output_tokens").astype(np.int64)[order],
        hash_offsets=offsets,
        hashes=hashes,
        session_id=session_id,
        after_id=after_id,
        delay_s=np.where(after_id >= 0, delays[order], 0.0),
    )
