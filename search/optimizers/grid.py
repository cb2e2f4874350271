"""Exhaustive grid: the baseline that enumerates the space exactly once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from search.study.space import Space
from search.trial import Params, TrialResult, params_key


class GridOptimizer:
    """Proposes every grid point of the space once, in the space's fixed order.

    Continuous knobs need a ``step`` or a ``grid`` list in the space file. Replayed results
    are skipped, so a resumed grid continues where it stopped.
    """

    def __init__(self, space: Space) -> None:
        self._points: Iterator[Params] = space.grid()
        self._done: set[str] = set()

    def ask(self, n: int) -> list[Params]:
        """The next ``n`` grid points not yet told; ``[]`` once the grid is exhausted."""
        out: list[Params] = []
        for p in self._points:
            key = params_key(p)
            if key in self._done:
                continue
            self._done.add(key)
            out.append(p)
            if len(out) == n:
                break
        return out

    def tell(self, results: Sequence[TrialResult]) -> None:
        """Mark points as done."""
        self._done.update(params_key(r.params) for r in results)
