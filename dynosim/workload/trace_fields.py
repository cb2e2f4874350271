"""Checks of one trace line's fields: token counts, times, hash ids, JSON and Azure timestamps.

:class:`FieldReader` knows the file's name, so that each malformed field raises
:class:`~dynosim.errors.WorkloadError` with the one-line message ``FILE:LINE: what is wrong``;
the readers (:mod:`dynosim.workload.mooncake`, :mod:`dynosim.workload.traces`) call it per line.
"""

from __future__ import annotations

import json
import math
from datetime import date
from pathlib import Path
from typing import Any

from dynosim.errors import WorkloadError
from dynosim.types import HASH_BLOCK_TOKENS
from dynosim.workload.limits import MAX_TIME_S, MAX_TOKENS

__all__ = ["FieldReader", "azure_ns", "json_line"]

INT64 = 1 << 63
"""Hash ids are held in 64-bit columns: each must lie in [-2^63, 2^63)."""


class FieldReader:
    """Shared validation helpers; knows the file name and counts clamped outputs."""

    def __init__(self, path: Path, *, clamp_zero_output: bool) -> None:
        self.path = path
        self.clamp_zero_output = clamp_zero_output
        self.clamped = 0

    def error(self, line: int, what: str) -> WorkloadError:
        """The error ``FILE:LINE: what`` (on one line)."""
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
        """Validate a prompt's hash ids: distinct, 64-bit, one per 512-token block."""
        expected = -(-input_tokens // HASH_BLOCK_TOKENS)
        if len(set(ids)) != len(ids):
            raise self.error(line, "hash_ids repeats an id (each block of a prompt is distinct)")
        if len(ids) != expected:
            raise self.error(
                line,
                f"hash_ids has {len(ids)} ids but input length {input_tokens} needs "
                f"ceil({input_tokens}/{HASH_BLOCK_TOKENS}) = {expected}",
            )
        if ids and not (min(ids) >= -INT64 and max(ids) < INT64):
            raise self.error(line, "hash_ids must be 64-bit integers, in [-2**63, 2**63)")
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


def json_line(reader: FieldReader, number: int, text: str) -> Any:
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


def azure_ns(text: str) -> int | None:
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
