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
        super().__init__(f"{field}: got {value!r}; allowed: {allowed}")


class InfeasibleError(DynosimError):
    """A configuration is well formed but cannot run (e.g. the model does not fit in memory)."""


class WorkloadError(DynosimError, ValueError):
    """A workload file or spec is malformed; the message starts with ``FILE:LINE:`` for traces."""
