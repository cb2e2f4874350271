"""The Azure LLM inference trace's common shape, read in chunks with one regex pass and numpy.

Azure's published CSVs (``AzureLLMInferenceTrace_conv.csv``, ``..._code.csv``) have the header
``TIMESTAMP,ContextTokens,GeneratedTokens`` and rows like ``2023-11-16 18:15:46.6805900,374,44``.
:func:`read_azure_fast` reads a file whose every row has that shape and whose every value passes
the checks of the line-by-line reader (:func:`dynosim.workload.traces._read_csv`), giving the
same rows; for any other file it returns False and the caller reads the file line by line,
which accepts what it accepts and names the first bad line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from dynosim.workload.columns import RowColumns
from dynosim.workload.limits import MAX_TIME_S, MAX_TOKENS

__all__ = ["read_azure_fast"]

IntArray = npt.NDArray[np.int64]

_ROW = re.compile(
    r"^[ \t]*([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"[ \t]*,[ \t]*([1-9][0-9]{0,15})[ \t]*,[ \t]*([1-9][0-9]{0,15})[ \t\r]*$",
    re.MULTILINE,
)
_FIRST_DAY = np.datetime64("0001-01-01", "D")  # datetime.date's first (numpy has year 0)
_MAX_DAYS = int(MAX_TIME_S // 86_400) + 2
"""A span of more days than this is refused anyway (and would overflow 64-bit nanoseconds)."""


def read_azure_fast(chunks: Iterable[list[str]], rows: RowColumns) -> bool:
    """Read every row after the header into ``rows``; False if one is not in the common shape.

    Args:
        chunks: The lines after the header, a list at a time.
        rows: Where the rows go (left partly filled when False is returned).
    """
    days: list[IntArray] = []
    seconds: list[IntArray] = []
    fractions: list[IntArray] = []
    for chunk in chunks:
        if not chunk:
            continue
        found = _ROW.findall("".join(chunk))
        if len(found) != len(chunk):  # another shape, a quoted field or a blank line
            return False
        date, hh, mm, ss, frac, ins, outs = zip(*found, strict=True)
        try:
            day = np.array(date, dtype="datetime64[D]")
        except ValueError:  # 2023-02-30
            return False
        h, m, s = (np.array(v, dtype=np.int64) for v in (hh, mm, ss))
        input_tokens = np.array(ins, dtype=np.int64)
        output_tokens = np.array(outs, dtype=np.int64)
        if (
            day.min() < _FIRST_DAY
            or h.max() > 23
            or m.max() > 59
            or s.max() > 60  # 60: a leap second
            or max(input_tokens.max(), output_tokens.max()) > MAX_TOKENS
        ):
            return False
        digits = np.fromiter(map(len, frac), dtype=np.int64, count=len(frac))
        value = np.array([f or "0" for f in frac], dtype=np.int64)
        days.append(day.astype(np.int64))
        seconds.append(h * 3_600 + m * 60 + s)
        fractions.append(value * 10 ** (9 - digits))
        counts = np.zeros(len(found), dtype=np.int64)
        rows.add(np.zeros(len(found)), input_tokens, output_tokens, counts, counts[:0])
    if not days:
        return True
    day = np.concatenate(days)
    day -= day.min()
    if day.max() > _MAX_DAYS:
        return False
    ns = (day * 86_400 + np.concatenate(seconds)) * 10**9 + np.concatenate(fractions)
    stamps = (ns - ns.min()) / 1e9  # as Python's (ns - start) / 1e9: int to float, divide
    if not stamps.max() < MAX_TIME_S:
        return False
    rows.set_timestamps(stamps)
    return True
