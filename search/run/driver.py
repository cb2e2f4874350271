"""The study driver: ask the optimizer, evaluate asynchronously, tell, store, stop.

``run_study`` starts a study or resumes one; it is the only writer of the storage. One loop:
keep every evaluator slot busy with proposals, record each result as it arrives (a RUNNING
trial becomes COMPLETE), tell it to the optimizer, and after each generation store the
hypervolume of the feasible front and check the stop rules (trial budget, wall time, plateau).
A generation is ``gen`` *simulated* trials: a config refused before simulating (over the GPU
budget, does not fit) is recorded but neither ends a generation nor feeds the plateau rule, so
cheap refusals cannot fill generations that show no progress and stop the study "converged"
(issue 20: 69 of 81 disaggregated proposals of a shipped study were refusals). The optimizers
resample such points before proposing them where they can (``search.optimizers``).

Identical configs (same config hash) are evaluated once: a repeated proposal is told the
earlier result and adds no trial. A config that cannot be built is recorded as an infeasible
trial without being simulated. Resume = reload the COMPLETE trials, replay them into a fresh
optimizer, mark trials left RUNNING by a crash FAIL and evaluate their params again first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from dynosim.errors import DynosimError
from search.optimizers import build_optimizer, generation_size
from search.optimizers.base import Optimizer
from search.results.front import pareto_front
from search.results.hypervolume import HypervolumeTracker, converged
from search.run.capacity import capacity_hint
from search.run.evaluate import EvalContext, evaluate_one, prepare
from search.run.evaluators import Evaluator, LocalEvaluator
from search.store import schema
from search.store.lease import Lease
from search.store.open import open_storage
from search.store.record import StudyRecord, check_directions
from search.study.load import LEVEL_KNOB
from search.study.study_file import StudyFile
from search.trial import Params, TrialResult, workload_id

if TYPE_CHECKING:
    from dynosim.types import Request
    from search.run.evaluate import SimulateFn

EvaluatorFactory = Callable[[EvalContext, Sequence["Request"]], Evaluator]
Progress = Callable[["RunState"], None]
Status = Literal["running", "converged", "budget", "stopped"]


@dataclass(slots=True)
class RunState:
    """What the driver knows; passed to the progress callback after every result."""

    name: str
    max_trials: int
    n_trials: int = 0
    n_feasible: int = 0
    n_duplicates: int = 0
    n_refused: int = 0
    """Recorded trials refused before simulating (they do not count toward the plateau)."""
    hypervolume: float = 0.0
    status: Status = "running"
    front: list[TrialResult] = field(default_factory=list)


def default_evaluator(sf: StudyFile) -> EvaluatorFactory:
    """The evaluator the study file's ``executor`` asks for."""
    ex = sf.executor
    timeout_s, memory_mb = sf.budget.trial_timeout_s, ex.memory_limit_mb

    def make(ctx: EvalContext, requests: Sequence[Request]) -> Evaluator:
        if ex.kind == "local":
            return LocalEvaluator(
                ctx, requests, trial_timeout_s=timeout_s, memory_limit_mb=memory_mb
            )
        from search.run.ray_evaluator import RayEvaluator

        return RayEvaluator(
            ctx,
            requests,
            address=ex.address,
            num_cpus=ex.num_cpus,
            max_retries=ex.max_retries,
            trial_timeout_s=timeout_s,
            memory_limit_mb=memory_mb,
        )

    return make


def run_study(
    sf: StudyFile,
    requests: Sequence[Request],
    *,
    warmup_requests: int = 0,
    workload_name: str = "",
    simulate_fn: SimulateFn | None = None,
    evaluator: EvaluatorFactory | None = None,
    resume: bool = False,
    progress: Progress | None = None,
) -> RunState:
    """Run (or resume) a study until a stop rule fires.

    Args:
        sf: The validated study file (for a resume, as stored in the study).
        requests: The workload.
        warmup_requests: Requests left out of the metrics.
        workload_name: Part of the workload id.
        simulate_fn: Replaces ``dynosim.simulate`` (tests).
        evaluator: Builds the evaluator; default from ``sf.executor``.
        resume: Continue the stored study instead of creating it.
        progress: Called after every recorded result.

    Returns:
        The final state; ``status`` is ``converged``, ``budget`` or ``stopped``.

    Raises:
        ConfigError: The study exists (new run) or is missing / differs (resume).
    """
    storage = open_storage(sf.storage)
    problem = sf.problem
    if resume:
        record = StudyRecord(storage, sf.name, url=sf.storage)
        check_directions(record.directions, problem.directions)
    else:
        attrs = {
            schema.STUDY: sf.data,
            schema.OBJECTIVES: [o.to_dict() for o in problem.objectives],
            schema.CONSTRAINTS: problem.constraint_dicts(),
            schema.HV_HISTORY: [],
        }
        record = StudyRecord.create(
            storage, sf.name, problem.directions, attrs=attrs, url=sf.storage
        )
    try:
        with Lease.acquire(record):  # before the reload fails the trials a dead driver left RUNNING
            record.set_attr(schema.STATUS, "running")
            return _drive(sf, record, requests, warmup_requests, workload_name, simulate_fn,
                          evaluator, progress)  # fmt: skip
    except BaseException:
        # A new study that never started a trial (an unreachable cluster, a bad token, Ctrl-C
        # while connecting) holds nothing; left behind, it would refuse its own name next time.
        if not resume:
            with contextlib.suppress(Exception):
                if not record.trials():
                    record.call(storage.delete_study, record.study_id)
        raise


def _drive(
    sf: StudyFile,
    record: StudyRecord,
    requests: Sequence[Request],
    warmup_requests: int,
    workload_name: str,
    simulate_fn: SimulateFn | None,
    evaluator: EvaluatorFactory | None,
    progress: Progress | None,
) -> RunState:
    wid = workload_id(requests, workload_name)
    if sf.load.mode != "fixed":  # the same workload judged another way is another study
        wid = hashlib.sha256(f"{wid}{sf.load.to_dict()}".encode()).hexdigest()[:16]
    ctx = EvalContext(
        problem=sf.problem,
        workload_id=wid,
        seed=sf.seed,
        warmup_requests=warmup_requests,
        simulate_fn=simulate_fn,
        load=sf.load,
        axis=sf.axis,
    )
    make = evaluator or default_evaluator(sf)
    run = _Run(sf, record, ctx, progress)
    if run.state.n_trials >= sf.budget.max_trials and not run.requeue:
        run.state.status = "budget"
        run.state.front = run.front()
        record.set_attr(schema.STATUS, "budget")
        return run.state
    ev = make(ctx, requests)
    try:
        run.loop(ev)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            run.state.status = "stopped"
        with contextlib.suppress(DynosimError):  # the storage may be what failed
            record.set_attr(schema.STATUS, run.state.status)
        raise
    else:
        record.set_attr(schema.STATUS, run.state.status)
    finally:
        ev.close()
    return run.state


@dataclass(slots=True)
class _InFlight:
    trial_id: int
    config_hash: str
    proposals: list[Params]


class _Run:
    """State of one driver session."""

    def __init__(
        self, sf: StudyFile, record: StudyRecord, ctx: EvalContext, progress: Progress | None
    ) -> None:
        self.sf, self.record, self.ctx, self.progress = sf, record, ctx, progress
        self.budget = sf.budget
        self.gen = self.budget.generation or generation_size(sf.optimizer)
        self.optimizer: Optimizer = build_optimizer(sf.optimizer, ctx.problem, sf.seed)
        attrs = record.user_attrs
        self.tracker = HypervolumeTracker(
            ctx.problem.directions, attrs.get(schema.HV_REFERENCE), sf.bounds
        )
        self.history: list[list[float]] = [list(h) for h in attrs.get(schema.HV_HISTORY, [])]
        self.state = RunState(name=sf.name, max_trials=self.budget.max_trials)
        self.cache: dict[str, TrialResult] = {}
        self.flight: dict[int, _InFlight] = {}
        self.flight_by_hash: dict[str, int] = {}
        self.requeue: deque[Params] = deque()
        self.start = time.monotonic()
        self.exhausted = False
        self.dup_streak = 0
        self._reload()

    def _reload(self) -> None:
        import optuna

        done: list[TrialResult] = []
        for t in self.record.trials():
            if t.state == optuna.trial.TrialState.COMPLETE:
                done.append(schema.decode(t))
            elif t.state == optuna.trial.TrialState.RUNNING:
                why = "left running by an interrupted driver; re-queued"
                self.record.fail(self.record.trial_id(t.number), why)
                self.requeue.append(dict(t.params))
        for r in done:
            self.cache[r.config_hash] = r
            self.state.n_refused += not self._simulated(r)
        if done:
            self.optimizer.tell(done)
        self.tracker.add([r.values for r in done if r.feasible])
        self.state.n_trials = len(done)
        self.state.n_feasible = sum(r.feasible for r in done)
        self.state.hypervolume = self.history[-1][1] if self.history else 0.0

    # -- the loop -------------------------------------------------------------------------

    def loop(self, ev: Evaluator) -> None:
        """Fill the evaluator, record results, until a stop rule fires and nothing is left."""
        if self.state.n_trials >= self.budget.max_trials:
            self.state.status = "budget"
        while True:
            if self.state.status == "running":
                self._fill(ev)
            if ev.in_flight == 0:
                if self.state.status == "running" and self.exhausted:
                    self.state.status = "converged"
                if self.state.status != "running":
                    break
                continue
            for tag, result in ev.wait():
                self._record(tag, result)
            self._check_time()
        self._generation(force=True)
        self.state.front = self.front()

    def _room(self, ev: Evaluator) -> int:
        started = self.state.n_trials + len(self.flight)
        return min(ev.capacity - ev.in_flight, self.budget.max_trials - started)

    def _fill(self, ev: Evaluator) -> None:
        while self.state.status == "running" and self._room(ev) > 0:
            n = self._room(ev)
            proposals = [self.requeue.popleft() for _ in range(min(n, len(self.requeue)))]
            if not proposals:
                proposals = self.optimizer.ask(n)
            if not proposals:
                self.exhausted = ev.in_flight == 0
                return
            started = self.state.n_trials + len(self.flight)
            for p in proposals:
                self._dispatch(ev, p)
            if self.state.n_trials + len(self.flight) == started and ev.in_flight:
                return  # only repeats of configs still running: wait for a result first
            if self.dup_streak >= max(50, 5 * self.gen):
                self.exhausted = True
                self.state.status = "converged"

    def _dispatch(self, ev: Evaluator, params: Params) -> None:
        prepared = prepare(self.ctx, params)
        digest = prepared.config_hash
        if digest in self.cache:
            self.state.n_duplicates += 1
            self.dup_streak += 1
            self.optimizer.tell([dataclasses.replace(self.cache[digest], params=params)])
            return
        if digest in self.flight_by_hash:
            self.flight[self.flight_by_hash[digest]].proposals.append(params)
            return
        self.dup_streak = 0
        if LEVEL_KNOB in params:
            self._queue_levels(params)
        trial_id = self.record.start(self.ctx.problem.space, params, self.ctx.seed)
        self.flight[trial_id] = _InFlight(trial_id, digest, [params])
        self.flight_by_hash[digest] = trial_id
        if prepared.config is None:  # cannot be built: record it without simulating
            self._record(trial_id, evaluate_one(self.ctx, params, ()), simulated=False)
        else:
            ev.submit(trial_id, params, hint=self._capacity_hint(params))

    def _capacity_hint(self, params: Params) -> float | None:
        """Capacity mode: where the search starts (see :func:`search.run.capacity.capacity_hint`).

        It only sets where the search starts: on the load grid the capacity found does not
        depend on it (for a monotone system).
        """
        if self.ctx.load.mode != "capacity":
            return None
        measured = [
            (r.params, r.metrics["load_level"])
            for r in self.cache.values()
            if r.metrics and r.metrics.get("capacity_rps", 0.0) > 0
        ]
        return capacity_hint(params, measured)

    def _queue_levels(self, params: Params) -> None:
        """A sweep runs every config at every level: queue the config's other levels next."""
        for level in reversed(self.ctx.load.levels):
            if level == params[LEVEL_KNOB]:
                continue
            sibling = {**params, LEVEL_KNOB: level}
            digest = prepare(self.ctx, sibling).config_hash
            if digest not in self.cache and digest not in self.flight_by_hash:
                self.requeue.appendleft(sibling)

    def _simulated(self, r: TrialResult) -> bool:
        """Whether a stored result was simulated (its config could be built)."""
        return r.runnable or prepare(self.ctx, r.params).config is not None

    @property
    def n_simulated(self) -> int:
        """Recorded trials that were simulated (the generations count these)."""
        return self.state.n_trials - self.state.n_refused

    def _record(self, tag: int, result: TrialResult, *, simulated: bool = True) -> None:
        f = self.flight.pop(tag)
        del self.flight_by_hash[f.config_hash]
        self.record.finish(f.trial_id, result)
        self.cache[result.config_hash] = result
        if f.proposals:
            self.optimizer.tell([dataclasses.replace(result, params=p) for p in f.proposals])
        s = self.state
        s.n_trials += 1
        s.n_refused += not simulated
        if result.feasible:
            s.n_feasible += 1
            self.tracker.add([result.values])
        if simulated and self.n_simulated % self.gen == 0:
            self._generation()
        if s.n_trials >= self.budget.max_trials and s.status == "running":
            s.status = "budget"
        if self.progress is not None:
            self.progress(s)

    def _generation(self, *, force: bool = False) -> None:
        n = self.state.n_trials
        if force and (not n or (self.history and self.history[-1][0] == n)):
            return
        hv = self.tracker.hypervolume()
        if self.tracker.reference is not None and schema.HV_REFERENCE not in self.record.user_attrs:
            self.record.set_attr(schema.HV_REFERENCE, self.tracker.reference)
        self.history.append([n, hv])
        self.record.set_attr(schema.HV_HISTORY, self.history)
        self.state.hypervolume = hv
        plateau = converged(self.history, self.budget.tol, self.budget.patience)
        if not force and plateau and self.state.status == "running":
            self.state.status = "converged"

    def _check_time(self) -> None:
        wall = self.budget.max_wall_s
        late = wall is not None and time.monotonic() - self.start >= wall
        if late and self.state.status == "running":
            self.state.status = "budget"

    def front(self) -> list[TrialResult]:
        """Feasible non-dominated results (recomputed from the cache)."""
        return pareto_front(list(self.cache.values()), self.ctx.problem.directions)
