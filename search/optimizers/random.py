"""Uniform random search: the reference optimizer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from search.study.space import Space
from search.trial import Params, TrialResult

RESAMPLE_TRIES = 64
"""Draws per proposal before an unbuildable one is handed out anyway."""


class RandomOptimizer:
    """Draws every knob independently (log-uniformly where the knob says so).

    Replayed results only move the random stream on, so a resumed study does not propose the
    same points again. With ``buildable``, a point that cannot become a config (over the GPU
    budget) is drawn again, up to ``RESAMPLE_TRIES`` times: uniform over the buildable points.
    """

    def __init__(
        self, space: Space, seed: int = 0, buildable: Callable[[Params], bool] | None = None
    ) -> None:
        self._space = space
        self._buildable = buildable
        self._seed = seed
        self._rng = np.random.default_rng(seed)
        self._asked = 0
        self._replayed = 0

    def ask(self, n: int) -> list[Params]:
        """``n`` independent random points."""
        if self._asked == 0 and self._replayed:
            self._rng = np.random.default_rng([self._seed, self._replayed])
        self._asked += n
        return [self._draw() for _ in range(n)]

    def _draw(self) -> Params:
        p = self._space.sample(self._rng)
        for _ in range(RESAMPLE_TRIES):
            if self._buildable is None or self._buildable(p):
                break
            p = self._space.sample(self._rng)
        return p

    def tell(self, results: Sequence[TrialResult]) -> None:
        """Random search does not learn; only replays are counted."""
        if self._asked == 0:
            self._replayed += len(results)
