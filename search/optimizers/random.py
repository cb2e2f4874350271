"""Uniform random search: the reference optimizer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from search.study.space import Space
from search.trial import Params, TrialResult


class RandomOptimizer:
    """Draws every knob independently (log-uniformly where the knob says so).

    Replayed results only move the random stream on, so a resumed study does not propose the
    same points again.
    """

    def __init__(self, space: Space, seed: int = 0) -> None:
        self._space = space
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._asked = 0
        self._replayed = 0

    def ask(self, n: int) -> list[Params]:
        """``n`` independent random points."""
        if self._asked == 0 and self._replayed:
            self._rng = np.random.default_rng([self._seed, self._replayed])
        self._asked += n
        return [self._space.sample(self._rng) for _ in range(n)]

    def tell(self, results: Sequence[TrialResult]) -> None:
        """Random search does not learn; only replays are counted."""
        if self._asked == 0:
            self._replayed += len(results)
