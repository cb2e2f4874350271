"""The one seam every optimizer implements: ``ask`` proposals, ``tell`` results.

Call order: ``tell`` any stored results first (replay, on resume), then alternate ``ask`` and
``tell``. Results enter only through ``tell``; telling a fresh optimizer every stored result
must re-seed it (that is how a study resumes). ``tell`` receives each proposal's result once,
with the proposal's own params, even when an identical config was evaluated only once.

``ask(n)`` may return fewer than ``n`` proposals: a generational optimizer waits for its
generation to be told; an exhausted one (the grid) returns ``[]`` for good. The driver stops
when nothing is in flight and ``ask`` returns ``[]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from search.trial import Params, TrialResult


class Optimizer(Protocol):
    """Proposes knob values and learns from their results."""

    def ask(self, n: int) -> list[Params]:
        """Up to ``n`` new proposals (possibly fewer, see the module docstring)."""
        ...

    def tell(self, results: Sequence[TrialResult]) -> None:
        """Learn from finished evaluations, proposed by this optimizer or replayed."""
        ...
