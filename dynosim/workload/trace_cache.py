"""A disk cache of parsed traces: a file's columns, keyed by its content and the parser's code.

Why: reading the Mooncake conversation trace (3 MB, 12,031 lines) into columns is ~380-420 M
instructions, about 4% of a whole ``dynosim simulate`` process on it (10.1 G, callgrind); a hit
is ~25 M to load the entry plus the file's sha256 (~1-3 ms of CPU with SHA extensions; 85 M
instructions under valgrind, which runs without them). Traces are replayed many times unchanged
(every simulate, validate and tune run of a study reads the same file), so the parse is paid
once per content.

A cache entry is ``<cache root>/traces/<sha256 of the file's bytes>[-clamp].npz`` (see
:func:`dynosim.cache.cache_root`; never next to the trace), holding the
:class:`~dynosim.workload.columns.RequestColumns`, the count of clamped output lengths (so the
warning is given again) and the parser's version: a digest of the source of the modules that
decide what the columns hold. An entry from another parser version, or one that cannot be read
or does not hold consistent columns, is parsed again and overwritten; entries are written
atomically (a temporary file, then :func:`os.replace`), and a cache that cannot be read or
written only costs the parse. Traces under :data:`MIN_BYTES` are not cached (their parse costs
less than a file). ``DYNOSIM_NO_TRACE_CACHE=1`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dynosim.cache import cache_root, write_atomic
from dynosim.workload.columns import RequestColumns

__all__ = ["MIN_BYTES", "cached_columns", "entry_path", "parser_version"]

MIN_BYTES = 1 << 20
"""Smaller traces are parsed every time (about 25 M instructions or less)."""

_PARSER_MODULES = (
    "dynosim.types",
    "dynosim.workload.limits",
    "dynosim.workload.trace_fields",
    "dynosim.workload.columns",
    "dynosim.workload.mooncake",
    "dynosim.workload.azure",
    "dynosim.workload.traces",
    __name__,
)
"""The modules whose code decides a trace's columns (all imported by the time they are read)."""

_INT = ("input_tokens", "output_tokens", "hash_offsets", "hashes", "session_id", "after_id")
_FLOAT = ("arrival_s", "delay_s")

Parse = Callable[[], tuple[RequestColumns, int]]


@functools.cache
def parser_version() -> str:
    """A digest of the parser modules' files: any edit to the parser invalidates every entry."""
    h = hashlib.sha256()
    for name in _PARSER_MODULES:
        h.update(Path(sys.modules[name].__file__ or name).read_bytes())
    return h.hexdigest()[:32]


def entry_path(path: Path, clamp_zero_output: bool) -> Path | None:
    """Where the columns of trace ``path`` are cached (None: caching is off or impossible)."""
    if os.environ.get("DYNOSIM_NO_TRACE_CACHE"):
        return None
    try:
        with path.open("rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        return cache_root() / "traces" / f"{digest}{'-clamp' if clamp_zero_output else ''}.npz"
    except (OSError, RuntimeError):  # RuntimeError: no home directory
        return None


def cached_columns(path: Path, clamp_zero_output: bool, parse: Parse) -> tuple[RequestColumns, int]:
    """The columns of trace ``path`` and its clamped count: from the cache, else ``parse()``.

    Args:
        path: The trace file (it is hashed; a file under :data:`MIN_BYTES` is only parsed).
        clamp_zero_output: Part of the key: the columns differ with it.
        parse: Reads the file; its errors propagate and nothing is cached.
    """
    try:
        before = path.stat()
    except OSError:
        return parse()
    entry = entry_path(path, clamp_zero_output) if before.st_size >= MIN_BYTES else None
    if entry is not None and (hit := _read(entry)) is not None:
        return hit
    columns, clamped = parse()
    if entry is not None and _unchanged(path, before):  # a file edited meanwhile: not cached
        with contextlib.suppress(OSError):  # read-only or full: only the parse is paid again
            write_atomic(entry, lambda f: _write(f, columns, clamped))
    return columns, clamped


def _unchanged(path: Path, before: os.stat_result) -> bool:
    with contextlib.suppress(OSError):
        after = path.stat()
        return (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    return False


def _write(f: object, columns: RequestColumns, clamped: int) -> None:
    arrays = {name: getattr(columns, name) for name in (*_INT, *_FLOAT)}
    np.savez(f, parser=np.array(parser_version()), clamped=np.array(clamped), **arrays)  # type: ignore[arg-type]


def _read(entry: Path) -> tuple[RequestColumns, int] | None:
    """The entry's columns, or None if it is missing, unreadable, stale or inconsistent."""
    try:
        with np.load(entry, allow_pickle=False) as data:
            if str(data["parser"]) != parser_version():
                return None
            arrays = {name: data[name] for name in (*_INT, *_FLOAT)}
            clamped = int(data["clamped"])
    except Exception:  # any damage (a truncated zip, a bad header, a missing array): parse again
        return None
    columns = RequestColumns(**arrays)
    return (columns, clamped) if _consistent(columns) else None


def _consistent(c: RequestColumns) -> bool:
    """Every column of the right type and length, and the offsets within the hashes."""
    n = len(c.arrival_s)
    arrays = [getattr(c, name) for name in (*_INT, *_FLOAT)]
    if any(a.ndim != 1 for a in arrays):
        return False
    if any(getattr(c, name).dtype != np.int64 for name in _INT) or any(
        getattr(c, name).dtype != np.float64 for name in _FLOAT
    ):
        return False
    lengths = {name: len(getattr(c, name)) for name in (*_INT, *_FLOAT)}
    if lengths.pop("hash_offsets") != n + 1 or lengths.pop("hashes") != int(c.hash_offsets[-1]):
        return False
    return n > 0 and set(lengths.values()) == {n} and c.hash_offsets[0] == 0
