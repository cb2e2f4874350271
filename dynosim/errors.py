"""Errors the simulator raises for bad input; each message is one line a user can act on."""

from __future__ import annotations


class DynosimError(Exception):
    """Base class: bad input that the CLI reports as one line, never as a traceback."""


class ConfigError(DynosimError, ValueError):
    """A configuration field has a value that is not allowed."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{_one_line(field)}: got {_short_repr(value)}; allowed: {allowed}")


_MAX_VALUE_CHARS = 200


def _one_line(text: str) -> str:
    """``text`` itself when printable, else its repr (a key with a newline stays one line)."""
    return text if text.isprintable() else repr(text)


def _short_repr(value: object) -> str:
    """The value's repr, cut to ``_MAX_VALUE_CHARS`` (a 5,000-digit number stays readable)."""
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4,300-digit str conversion limit
        return f"<an integer of {value.bit_length() if isinstance(value, int) else '?'} bits>"
    if len(text) > _MAX_VALUE_CHARS:
        return f"{text[: _MAX_VALUE_CHARS - 20]}... ({len(text):,} characters)"
    return text


class InfeasibleError(DynosimError):
    """A configuration is well formed but cannot run (e.g. the model does not fit in memory)."""


class WorkloadError(DynosimError, ValueError):
    """A workload file or spec is malformed; the message starts with ``FILE:LINE:`` for traces."""
