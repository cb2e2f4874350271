"""Any Optuna sampler behind ask/tell, on a private in-memory study.

The adapter never touches the study's persistent storage (only the driver writes there). Its
in-memory study holds the sampler's view: the trials it asked (RUNNING until told, which TPE's
constant liar uses) and every told or replayed result with its constraint values, so samplers
treat infeasible configs as infeasible. Replayed trials of a genetic sampler (NSGA-II/III) get
a generation number from their order, so the sampler uses them as parents after a resume.

Budget-aware resampling: a proposal that cannot become a config (``buildable`` is false: over the
GPU budget, a model that does not fit) is never handed out. Its Optuna trial is told FAIL (every
sampler here ignores FAIL trials: a GA's generations count COMPLETE trials only, TPE models
COMPLETE ones) and the sampler is asked again, first with the refused point's structure knobs
fixed (the knobs other knobs' ``when`` depends on, e.g. ``mode``; ``enqueue_trial`` with those
params), then freely; after ``RESAMPLE_TRIES`` refusals the last point is handed out and the
driver records it as infeasible. Resampling rather than repair, because Optuna's samplers draw
every parameter through ``Trial.suggest_*`` and cannot take a modified point back; rather than
telling the refusal as an infeasible COMPLETE trial, because such trials would fill a generation
(69 of 81 disaggregated proposals of the agg-vs-disagg study were over the budget: issue 20).
Keeping the structure knobs keeps the sampler's choice of branch: a free redraw would favour the
branch with fewer refusals (aggregated pools, which never exceed the budget) for no reason of
merit.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from search.store.schema import distributions
from search.study.space import Knob, Params, Space
from search.trial import TrialResult, params_key

if TYPE_CHECKING:
    import optuna

RESAMPLE_TRIES = 64
"""Draws per proposal before an unbuildable one is handed out anyway."""


def _suggest(trial: optuna.trial.Trial, knob: Knob) -> Any:
    if knob.kind == "choice":
        return trial.suggest_categorical(knob.name, list(knob.values))
    if knob.kind == "int":
        step = int(knob.step) if knob.step is not None else 1
        return trial.suggest_int(knob.name, int(knob.low), int(knob.high), step=step, log=knob.log)
    return trial.suggest_float(knob.name, knob.low, knob.high, step=knob.step, log=knob.log)


class OptunaOptimizer:
    """Wraps an Optuna sampler instance.

    Args:
        space: The knobs.
        sampler: A configured sampler (seeded by the caller).
        directions: Objective directions, ``"maximize"``/``"minimize"``.
        initial_design: Latin-hypercube points a fresh study starts with (TPE).
        seed: Seeds the initial design.
        buildable: Whether a point can become a config at all (no simulation); points that
            cannot are drawn again (see the module docstring).
    """

    def __init__(
        self,
        space: Space,
        sampler: optuna.samplers.BaseSampler,
        directions: Sequence[str],
        *,
        initial_design: int = 0,
        seed: int = 0,
        buildable: Callable[[Params], bool] | None = None,
    ) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._space = space
        self._sampler = sampler
        self._study = optuna.create_study(directions=[str(d) for d in directions], sampler=sampler)  # type: ignore[misc]
        self._pending: dict[str, deque[optuna.trial.Trial]] = defaultdict(deque)
        self._replayed = 0
        self._design = initial_design
        self._seed = seed
        self._buildable = buildable
        self._structure = sorted({key for k in space.knobs for key, _ in k.when})
        self.refused = 0
        """Proposals drawn again because they could not be built."""

    @property
    def study(self) -> optuna.Study:
        """The private in-memory study (for inspection in tests)."""
        return self._study

    def ask(self, n: int) -> list[Params]:
        """``n`` proposals, each an Optuna trial left RUNNING until told."""
        if self._design and not self._study.trials:  # a fresh study: space-filling start
            rng = np.random.default_rng(np.random.SeedSequence([self._seed, 0x1A5]))
            for point in latin_hypercube(self._space, self._design, rng):
                self._study.enqueue_trial(point)
        self._design = 0
        out: list[Params] = []
        for _ in range(n):
            trial, params = self._draw()
            self._pending[params_key(params)].append(trial)
            out.append(params)
        return out

    def _draw(self) -> tuple[optuna.trial.Trial, Params]:
        """One proposal, drawn again while it cannot be built (up to ``RESAMPLE_TRIES``)."""
        trial, params = self._sample()
        tries = 0
        while self._buildable is not None and tries < RESAMPLE_TRIES:
            if self._buildable(params):
                break
            self.refused += 1
            self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
            tries += 1
            if tries < RESAMPLE_TRIES // 2:  # keep the branch the sampler chose
                fixed = {k: params[k] for k in self._structure if k in params}
                if fixed:
                    self._study.enqueue_trial(fixed)
            trial, params = self._sample()
        return trial, params

    def _sample(self) -> tuple[optuna.trial.Trial, Params]:
        trial = self._study.ask()
        params: Params = {}
        for knob in self._space.knobs:
            if knob.active(params):
                params[knob.name] = _suggest(trial, knob)
        return trial, params

    def tell(self, results: Sequence[TrialResult]) -> None:
        """Finish the matching asked trials; add unknown results as replayed trials."""
        for r in results:
            queue = self._pending.get(params_key(r.params))
            if queue:
                trial = queue.popleft()
                for i, c in enumerate(r.constraints):
                    trial.set_constraint(str(i), c)
                self._study.tell(trial, list(r.values))
            else:
                self._replay(r)

    def _replay(self, r: TrialResult) -> None:
        system_attrs: dict[str, Any] = {"constraints": list(r.constraints)}
        population = getattr(self._sampler, "population_size", None)
        key = getattr(self._sampler, "_get_generation_key", None)
        if population and key is not None:
            system_attrs[key()] = self._replayed // population
        self._replayed += 1
        trial = self._optuna.trial.create_trial(
            params=dict(r.params),
            distributions=distributions(self._space, r.params),
            values=list(r.values),
            system_attrs=system_attrs,
        )
        self._study.add_trial(trial)


def latin_hypercube(space: Space, n: int, rng: np.random.Generator) -> list[Params]:
    """``n`` points where every knob's values are spread evenly (a Latin hypercube).

    A choice knob takes each value ``n / len(values)`` times, a numeric knob one value in each
    of ``n`` equal strata of its range (log range for ``log`` knobs); columns are shuffled
    independently. Knobs made inactive by a ``when`` condition are dropped per point.
    """
    columns: dict[str, list[Any]] = {}
    for k in space.knobs:
        if k.kind == "choice":
            col: list[Any] = [k.values[i % len(k.values)] for i in range(n)]
        else:
            u = (np.arange(n) + rng.random(n)) / n
            lo, hi = (np.log(k.low), np.log(k.high)) if k.log else (k.low, k.high)
            x = lo + u * (hi - lo)
            x = np.exp(x) if k.log else x
            if k.step is not None:
                x = k.low + np.round((x - k.low) / k.step) * k.step
            # Stepped floats are rounded as Space.sample and the grid round them (0.8 + 3 x
            # 0.05 is 0.9500000000000001, which Optuna's distribution refuses).
            col = [
                round(float(v)) if k.kind == "int" else round(float(v), 12 if k.step else 17)
                for v in x
            ]
        columns[k.name] = [col[i] for i in rng.permutation(n)]
    return [space.active_params({name: c[i] for name, c in columns.items()}) for i in range(n)]
