"""The pieces of an export: a shell :class:`Command`, a titled :class:`Part`, :class:`TrialInfo`.

Also the constants and the small formatting helpers the engine, Dynamo and AIPerf modules
share: the frontend's port, a number and a file-name slug as text.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FRONTEND_PORT = 8000
_WRAP = 100


@dataclass(frozen=True, slots=True)
class Command:
    """One shell command: environment assignments and an argument vector."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def line(self) -> str:
        """The command on one line, shell-quoted."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        return f"{env} {shlex.join(self.argv)}".strip()

    def text(self) -> str:
        """The command, broken before each ``--option`` when it is long."""
        if len(self.line()) <= _WRAP:
            return self.line()
        parts = [" ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)] if self.env else []
        groups: list[list[str]] = [[]]
        for tok in self.argv:
            if tok.startswith("--") and groups[-1]:
                groups.append([])
            groups[-1].append(tok)
        lines = [" ".join([*parts, shlex.join(groups[0])])]
        for g in groups[1:]:
            chunk = shlex.join(g)
            if len(lines[-1]) + 1 + len(chunk) > _WRAP - 2:
                lines.append("    " + chunk)
            else:
                lines[-1] += " " + chunk
        return " \\\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """``{"command", "argv", "env"}``."""
        return {"command": self.line(), "argv": list(self.argv), "env": dict(self.env)}


@dataclass(frozen=True, slots=True)
class Part:
    """A titled group of commands with the notes that explain them."""

    title: str
    commands: tuple[Command, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """``{"title", "commands", "notes"}``."""
        return {
            "title": self.title,
            "commands": [c.to_dict() for c in self.commands],
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialInfo:
    """What the export says about the trial besides its configuration."""

    study_name: str
    number: int
    feasible: bool
    reason: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)


def slug(name: str) -> str:
    """``name`` with every character but letters, digits and ``-_.`` replaced by ``-``."""
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "study"


def num(v: float) -> str:
    """A float as ``%g`` (``0.9``, ``1e-05``); any other number as ``str``."""
    return f"{v:g}" if isinstance(v, float) else str(v)
