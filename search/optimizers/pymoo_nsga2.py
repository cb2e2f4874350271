"""pymoo NSGA-II on mixed variables, driven by ask/tell one generation at a time.

Knobs become pymoo variables: a choice is ``Choice``, an integer ``Integer``, a stepped number
an ``Integer`` index into its steps, a log-scale float a ``Real`` on log10, a float ``Real``.
``MixedVariableGA`` with rank-and-crowding survival is NSGA-II for mixed variables: uniform
crossover and random mutation for choices, SBX and polynomial mutation (rounded) for integers
and reals, duplicates eliminated. Constraints go in through ``g_con``; maximised objectives are
negated. Inactive knobs (a failed ``when``) still exist for pymoo and are dropped from params.

A repair runs on every new individual (initial sampling and offspring): inactive knobs get one
canonical value, so pymoo's duplicate elimination sees configs as they are evaluated, and an
individual that cannot be built (``buildable`` is false, e.g. over the GPU budget) is replaced by
a random buildable point (up to ``REPAIR_TRIES`` draws). Such points would only be infeasible
trials; the repair spends no evaluation on them.

Resume: stored results told before the first ``ask`` become the initial population (pymoo's
``sampling`` given as an evaluated ``Population``); survival keeps the best ``pop_size``.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from search.study.space import Knob, Space
from search.trial import Params, TrialResult, Value, params_key

REPAIR_TRIES = 50


def _variable(knob: Knob) -> Any:
    from pymoo.core.variable import Choice, Integer, Real

    if knob.kind == "choice":
        return Choice(options=list(knob.values))
    if knob.step is not None:
        return Integer(bounds=(0, _steps(knob)))
    if knob.kind == "int":
        return Integer(bounds=(int(knob.low), int(knob.high)))
    if knob.log:
        return Real(bounds=(math.log10(knob.low), math.log10(knob.high)))
    return Real(bounds=(knob.low, knob.high))


def _steps(knob: Knob) -> int:
    assert knob.step is not None
    return math.floor((knob.high - knob.low) / knob.step + 1e-9)


def _decode(knob: Knob, x: Any) -> Value:
    x = x.item() if isinstance(x, np.generic) else x
    if knob.kind == "choice":
        return x  # type: ignore[no-any-return,unused-ignore]
    if knob.step is not None:
        v = knob.low + int(x) * knob.step
        return int(v) if knob.kind == "int" else round(v, 12)
    if knob.kind == "int":
        return int(x)
    if knob.log:
        return float(min(knob.high, max(knob.low, 10.0 ** float(x))))
    return float(x)


def _encode(knob: Knob, v: Value | None) -> Any:
    if v is None:  # inactive knob: any value in the domain
        v = knob.values[0] if knob.kind == "choice" else knob.low
    if knob.kind == "choice":
        return v
    assert not isinstance(v, str)
    if knob.step is not None:
        return round((float(v) - knob.low) / knob.step)
    if knob.kind == "int":
        return int(v)
    return math.log10(float(v)) if knob.log else float(v)


class PymooNSGA2:
    """NSGA-II (pymoo ``MixedVariableGA`` + ``RankAndCrowding``) as an ask/tell optimizer.

    Args:
        space: The knobs.
        directions: Objective directions.
        n_constraints: Constraint values per result.
        pop_size: Population size (and offspring per generation).
        seed: pymoo's seed; the same seed gives the same proposals.
        buildable: Whether a point can become a config at all (no simulation); points that
            cannot are repaired before they are proposed.
    """

    def __init__(
        self,
        space: Space,
        directions: Sequence[str],
        n_constraints: int,
        *,
        pop_size: int = 16,
        seed: int = 0,
        buildable: Callable[[Params], bool] | None = None,
    ) -> None:
        from pymoo.core.problem import Problem

        self._space = space
        self._sign = np.array([-1.0 if d == "maximize" else 1.0 for d in directions])
        self._problem = Problem(
            vars={k.name: _variable(k) for k in space.knobs},
            n_obj=len(directions),
            n_ieq_constr=n_constraints,
        )
        self._pop_size = pop_size
        self._seed = seed
        self._buildable = buildable
        self._algorithm: Any = None
        self._replay: list[TrialResult] = []
        self._pop: Any = None
        self._f: np.ndarray[Any, Any] | None = None
        self._g: np.ndarray[Any, Any] | None = None
        self._filled: np.ndarray[Any, Any] | None = None
        self._unasked: deque[int] = deque()
        self._pending: dict[str, deque[int]] = defaultdict(deque)

    def _setup(self) -> None:
        from pymoo.core.mixed import (
            MixedVariableDuplicateElimination,
            MixedVariableGA,
            MixedVariableMating,
        )
        from pymoo.core.population import Population
        from pymoo.operators.survival.rank_and_crowding import RankAndCrowding
        from pymoo.termination.max_gen import MaximumGenerationTermination

        repair = _make_repair(self._space, self._buildable, self._seed)
        dedupe = MixedVariableDuplicateElimination()
        kwargs: dict[str, Any] = {
            "pop_size": self._pop_size,
            "survival": RankAndCrowding(),
            "repair": repair,
            "eliminate_duplicates": dedupe,
            "mating": MixedVariableMating(repair=repair, eliminate_duplicates=dedupe),
        }
        if self._replay:
            x_all = np.empty(len(self._replay), dtype=object)
            x_all[:] = [{k.name: _encode(k, r.params.get(k.name)) for k in self._space.knobs}
                    for r in self._replay]  # fmt: skip
            kwargs["sampling"] = Population.new(X=x_all)
        self._algorithm = MixedVariableGA(**kwargs)
        self._algorithm.setup(
            self._problem, termination=MaximumGenerationTermination(10**9), seed=self._seed
        )
        if self._replay:
            pop = self._algorithm.ask()
            f_obj, g_con = self._arrays(self._replay)
            self._finish(pop, f_obj, g_con)
            self._replay = []

    def _arrays(
        self, results: Sequence[TrialResult]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        f_obj = np.array([r.values for r in results], dtype=float) * self._sign
        g_con = np.array([r.constraints for r in results], dtype=float)
        return f_obj, g_con.reshape(len(results), self._problem.n_ieq_constr)

    def _finish(self, pop: Any, f_obj: np.ndarray[Any, Any], g_con: np.ndarray[Any, Any]) -> None:
        from pymoo.problems.static import StaticProblem

        static = StaticProblem(self._problem, F=f_obj, G=g_con) if g_con.shape[1] else None
        static = static or StaticProblem(self._problem, F=f_obj)
        self._algorithm.evaluator.eval(static, pop)
        self._algorithm.tell(infills=pop)

    def ask(self, n: int) -> list[Params]:
        """Up to ``n`` individuals of the current generation not yet handed out."""
        if self._algorithm is None:
            self._setup()
        if self._pop is None:
            self._pop = self._algorithm.ask()
            size = len(self._pop)
            self._f = np.zeros((size, self._problem.n_obj))
            self._g = np.zeros((size, self._problem.n_ieq_constr))
            self._filled = np.zeros(size, dtype=bool)
            self._unasked = deque(range(size))
        out: list[Params] = []
        while self._unasked and len(out) < n:
            i = self._unasked.popleft()
            x = self._pop[i].X
            values = {k.name: _decode(k, x[k.name]) for k in self._space.knobs}
            params = self._space.active_params(values)
            self._pending[params_key(params)].append(i)
            out.append(params)
        return out

    def tell(self, results: Sequence[TrialResult]) -> None:
        """Record results; when the generation is complete, let pymoo select survivors."""
        for r in results:
            queue = self._pending.get(params_key(r.params))
            if not queue:
                if self._algorithm is None:
                    self._replay.append(r)
                continue
            i = queue.popleft()
            assert self._f is not None
            assert self._g is not None
            assert self._filled is not None
            f_obj, g_con = self._arrays([r])
            self._f[i], self._g[i], self._filled[i] = f_obj[0], g_con[0], True
        if self._pop is not None and self._filled is not None and self._filled.all():
            assert self._f is not None
            assert self._g is not None
            self._finish(self._pop, self._f, self._g)
            self._pop = None
            self._pending.clear()


def _make_repair(space: Space, buildable: Callable[[Params], bool] | None, seed: int) -> Any:
    """A pymoo ``Repair``: canonical inactive knobs, unbuildable points redrawn at random."""
    from pymoo.core.repair import Repair

    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    knobs = space.knobs

    class CanonicalRepair(Repair):  # type: ignore[misc]
        def _do(self, problem: Any, xs: Any, **kwargs: Any) -> Any:
            for i, x in enumerate(xs):
                params = space.active_params({k.name: _decode(k, x[k.name]) for k in knobs})
                tries = 0
                while buildable is not None and not buildable(params) and tries < REPAIR_TRIES:
                    params = space.sample(rng)
                    tries += 1
                xs[i] = {k.name: _encode(k, params.get(k.name)) for k in knobs}
            return xs

    return CanonicalRepair()
