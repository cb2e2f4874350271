"""Examples run per fuzz target, printed by ``conftest.py`` at the end of the session."""

from __future__ import annotations

from collections import Counter

CASES: Counter[str] = Counter()
"""Every call of a target's body (shrinking included) adds one to the target's count."""


def count(target: str) -> None:
    """Record one case of ``target``."""
    CASES[target] += 1
