"""Evaluation: knob values in, a scored :class:`TrialResult` out.

:func:`evaluate_one` is pure and in-process; the evaluators only decide where it runs.
:class:`LocalEvaluator` runs it in the driver (tests, debugging); ``search.ray_evaluator``
runs it as Ray tasks. Every failure of a config (it does not build, does not fit, the simulator
raises) becomes an infeasible result with the reason, never an exception.

Bounds: with a trial time limit or a memory limit, :class:`LocalEvaluator` runs each evaluation
in a forked child (:class:`BoundedChild`) that is killed when it overruns and whose address
space is capped (:func:`memory_cap`); a hang or a runaway allocation becomes an infeasible result
with the reason ("exceeded the trial time limit of N s", "exceeded the memory limit of N MiB").
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dynosim.errors import DynosimError
from search.load import (
    HINT_KEY,
    LEVEL_KNOB,
    LoadAxis,
    LoadSpec,
    Probe,
    add_load_metrics,
    capacity_metrics,
    find_capacity,
    slo_monitor,
)
from search.problem import Problem, config_hash
from search.space import Params

if TYPE_CHECKING:
    from dynosim.config import DeploymentConfig
    from dynosim.slo_monitor import SLOMonitor
    from dynosim.types import Request

SimulateFn = Callable[..., Any]
"""``simulate(config, requests, *, seed, warmup_requests) -> Metrics`` (``dynosim.simulate``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialResult:
    """One evaluation, as stored and as told to an optimizer.

    Attributes:
        params: The knob values (active knobs only).
        config: ``DeploymentConfig.to_dict()``, or the unvalidated merge if it did not build.
        config_hash: sha256 of config + workload id + seed; equal hashes are evaluated once.
        metrics: ``Metrics.flat()``, or ``{}`` when the config could not run.
        values: Objective values in study directions (penalties when not runnable).
        constraints: Constraint values, ``<= 0`` satisfied (see ``search.problem``).
        feasible: The config ran and met every constraint.
        reason: Why it is infeasible, or ``None``.
        seed: The simulation seed.
        wall_s: Wall time of the evaluation.
    """

    params: Params
    config: dict[str, Any]
    config_hash: str
    metrics: dict[str, float]
    values: tuple[float, ...]
    constraints: tuple[float, ...]
    feasible: bool
    reason: str | None
    seed: int
    wall_s: float

    @property
    def runnable(self) -> bool:
        """True when the config built and the simulation produced metrics."""
        return bool(self.metrics)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalContext:
    """What every evaluation of a study shares (small and picklable; requests travel apart).

    Attributes:
        problem: Space, objectives, constraints, fixed fields.
        workload_id: Digest of the workload (and load mode), part of every config hash.
        seed: Simulation seed.
        warmup_requests: Requests left out of the metrics.
        simulate_fn: Replaces ``dynosim.simulate`` (tests).
        load: The load mode.
        axis: How a load level becomes requests (``None``: the requests as given).
    """

    problem: Problem
    workload_id: str
    seed: int = 0
    warmup_requests: int = 0
    simulate_fn: SimulateFn | None = None
    load: LoadSpec = field(default_factory=LoadSpec)
    axis: LoadAxis | None = None

    @property
    def monitor(self) -> SLOMonitor | None:
        """The early-stop rules every simulation gets (``None`` when off)."""
        return slo_monitor(self.problem.constraints) if self.load.stops_early else None


def prepare(
    ctx: EvalContext, params: Params
) -> tuple[DeploymentConfig | None, dict[str, Any], str, str | None]:
    """Build the config and its hash before any simulation.

    Returns:
        ``(config or None, config dict, config hash, infeasibility reason or None)``.
    """
    level = params.get(LEVEL_KNOB)
    try:
        config = ctx.problem.to_config(params)
    except DynosimError as exc:
        data = ctx.problem.config_dict(params)
        return None, data, config_hash(data, ctx.workload_id, ctx.seed, level), str(exc)
    data = config.to_dict()
    return config, data, config_hash(data, ctx.workload_id, ctx.seed, level), None


def evaluate_one(ctx: EvalContext, params: Params, requests: Sequence[Request]) -> TrialResult:
    """Simulate one configuration and score it; never raises for a bad config.

    Args:
        ctx: The study's shared context (problem, seed, simulate function).
        params: Knob values.
        requests: The workload.

    Returns:
        The scored result; infeasible with a reason when the config cannot run.
    """
    t0 = time.perf_counter()
    hint = params.get(HINT_KEY)
    params = {k: v for k, v in params.items() if k != HINT_KEY}
    config, data, digest, reason = prepare(ctx, params)
    problem = ctx.problem
    metrics: dict[str, float] = {}
    forced: str | None = None
    if config is not None:
        try:
            metrics, forced = measure(ctx, config, params, requests, hint)
        except DynosimError as exc:
            reason = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a simulator bug must not end a long study
            where = traceback.extract_tb(exc.__traceback__)[-1]
            at = f"{where.filename}:{where.lineno}"
            reason = f"simulator error {type(exc).__name__}: {exc} ({at})"
    score = problem.score(metrics) if metrics else problem.penalty(reason or "no metrics")
    if metrics and forced is not None:
        score = problem.unmet(score, forced)
    return TrialResult(
        params=dict(params),
        config=data,
        config_hash=digest,
        metrics=metrics,
        values=score.values,
        constraints=score.constraints,
        feasible=score.feasible,
        reason=score.reason,
        seed=ctx.seed,
        wall_s=time.perf_counter() - t0,
    )


def measure(
    ctx: EvalContext,
    config: DeploymentConfig,
    params: Params,
    requests: Sequence[Request],
    hint: object = None,
) -> tuple[dict[str, float], str | None]:
    """Simulate ``config`` as the study's load mode says (``hint``: a capacity search's start).

    Returns:
        ``(metrics, reason)``: the trial's metrics (with ``load_level`` and, in capacity
        mode, the capacity metrics) and, when the run cannot count as feasible whatever its
        metrics say (stopped early, no load meets the SLO), why.
    """
    axis = ctx.axis
    if ctx.load.mode == "capacity":
        assert axis is not None
        found = find_capacity(
            lambda level: run_probe(ctx, config, requests, level),
            axis,
            ctx.load,
            hint=float(hint) if isinstance(hint, int | float) else None,
        )
        return capacity_metrics(found, config.gpus, len(requests)), found.reason
    if ctx.load.mode == "sweep":
        assert axis is not None
        p = run_probe(ctx, config, requests, float(params[LEVEL_KNOB]))
    else:
        level = axis.base if axis is not None else 1.0
        p = run_probe(ctx, config, requests, level, as_given=True)
    early = p.reason if p.stopped else None
    return p.metrics, early


def run_probe(
    ctx: EvalContext,
    config: DeploymentConfig,
    requests: Sequence[Request],
    level: float,
    *,
    as_given: bool = False,
) -> Probe:
    """One simulation at ``level`` (``as_given``: the requests as they are), scored."""
    simulate = ctx.simulate_fn if ctx.simulate_fn is not None else _default_simulate()
    speedup = 1.0
    warmup = ctx.warmup_requests
    if not as_given and ctx.axis is not None:
        requests, speedup = ctx.axis.workload_at(level, requests)
        warmup = ctx.axis.warmup_at(level, warmup)
    kwargs: dict[str, Any] = {}
    if speedup != 1.0:
        kwargs["speedup"] = speedup
    monitor = ctx.monitor
    if monitor is not None:
        kwargs["stop"] = monitor
    result = simulate(config, requests, seed=ctx.seed, warmup_requests=warmup, **kwargs)
    metrics = {k: float(v) for k, v in result.flat().items()}
    add_load_metrics(metrics, level, config.gpus)
    early = getattr(result, "early_stop", None)
    score = ctx.problem.score(metrics)
    return Probe(
        level=level,
        metrics=metrics,
        feasible=score.feasible and early is None,
        simulated_requests=int(metrics.get("simulated_requests", len(requests))),
        reason=early or score.reason,
        stopped=early is not None,
    )


def _default_simulate() -> SimulateFn:
    from dynosim import simulate

    return simulate


class Evaluator(Protocol):
    """Runs evaluations, possibly many at once.

    Call order: ``submit`` up to ``capacity`` evaluations, then ``wait`` for at least one to
    finish, submit more, ...; ``close`` once. Results come back tagged with the caller's tag, in
    completion order.
    """

    @property
    def capacity(self) -> int:
        """How many evaluations can usefully run at once."""
        ...

    @property
    def in_flight(self) -> int:
        """Submitted evaluations not yet returned by ``wait``."""
        ...

    def submit(self, tag: int, params: Params) -> None:
        """Start evaluating ``params``; its result comes back with ``tag``."""
        ...

    def wait(self) -> list[tuple[int, TrialResult]]:
        """Block until at least one evaluation is done (``[]`` when none is in flight)."""
        ...

    def close(self) -> None:
        """Release resources; in-flight evaluations are abandoned."""
        ...


class LocalEvaluator:
    """Evaluates on this machine, one at a time, in submission order.

    Without limits an evaluation runs in the calling process (tests, debugging); with a time or
    memory limit it runs in a forked child process (see :class:`BoundedChild`), which is
    killed when it overruns, so a hang or a runaway costs one trial, not the study.

    Args:
        ctx: The study's shared evaluation context.
        requests: The workload.
        trial_timeout_s: Wall time one evaluation may take (``None``: no limit).
        memory_limit_mb: Memory one evaluation may allocate (``None``: no limit).
    """

    def __init__(
        self,
        ctx: EvalContext,
        requests: Sequence[Request],
        *,
        trial_timeout_s: float | None = None,
        memory_limit_mb: int | None = None,
    ) -> None:
        self._ctx = ctx
        self._requests = requests
        self._queue: deque[tuple[int, Params]] = deque()
        self._timeout_s = trial_timeout_s
        self._memory_mb = memory_limit_mb
        self._child: BoundedChild | None = None

    @property
    def capacity(self) -> int:
        """One at a time."""
        return 1

    @property
    def in_flight(self) -> int:
        """Queued evaluations."""
        return len(self._queue)

    def submit(self, tag: int, params: Params) -> None:
        """Queue ``params``; it runs on the next ``wait``."""
        self._queue.append((tag, params))

    def wait(self) -> list[tuple[int, TrialResult]]:
        """Run the oldest queued evaluation."""
        if not self._queue:
            return []
        tag, params = self._queue.popleft()
        if self._timeout_s is None and self._memory_mb is None:
            return [(tag, evaluate_one(self._ctx, params, self._requests))]
        if self._child is None:
            self._child = BoundedChild(self._ctx, self._requests, self._memory_mb)
        return [(tag, self._child.evaluate(params, self._timeout_s))]

    def close(self) -> None:
        """Drop anything queued; stop the child process."""
        self._queue.clear()
        if self._child is not None:
            self._child.stop()
            self._child = None


# -- bounded evaluations --------------------------------------------------------------------


def timeout_reason(timeout_s: float) -> str:
    """The reason recorded for an evaluation cancelled at its time limit."""
    return f"exceeded the trial time limit of {timeout_s:g} s"


def failed_result(ctx: EvalContext, params: Params, why: str, wall_s: float) -> TrialResult:
    """An evaluation that produced nothing (timed out, lost, its process died), scored as such.

    A config that does not build keeps its own reason (it is why nothing could run).
    """
    params = {k: v for k, v in params.items() if k != HINT_KEY}
    _, data, digest, reason = prepare(ctx, params)
    score = ctx.problem.penalty(reason or why)
    return TrialResult(
        params=dict(params),
        config=data,
        config_hash=digest,
        metrics={},
        values=score.values,
        constraints=score.constraints,
        feasible=False,
        reason=score.reason,
        seed=ctx.seed,
        wall_s=wall_s,
    )


def within_memory(
    result: TrialResult, ctx: EvalContext, memory_limit_mb: int | None
) -> TrialResult:
    """Name the memory limit in the reason of an evaluation that ran out of memory under it."""
    if memory_limit_mb is None or result.metrics or "MemoryError" not in (result.reason or ""):
        return result
    why = f"exceeded the memory limit of {memory_limit_mb} MiB ({result.reason})"
    score = ctx.problem.penalty(why)
    return dataclasses.replace(
        result, values=score.values, constraints=score.constraints, reason=score.reason
    )


@contextmanager
def memory_cap(memory_limit_mb: int | None) -> Iterator[None]:
    """Cap the address space this process may add (``RLIMIT_AS``) by ``memory_limit_mb``.

    The cap is relative to the process's size on entry: a forked child or a Ray worker
    already maps far more than it uses (libraries, thread stacks, the object store), so an
    absolute cap would fail at once. An allocation beyond it raises ``MemoryError``. The
    previous limit is restored on exit. Does nothing without a limit or off Linux.
    """
    if memory_limit_mb is None:
        yield
        return
    import resource

    size = _address_space_bytes()
    if size is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = size + memory_limit_mb * 2**20
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space_bytes() -> int | None:
    """This process's virtual size (``VmSize``), or ``None`` where ``/proc`` has none."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class BoundedChild:
    """:func:`evaluate_one` in a long-lived forked child process, killed when it overruns.

    The child is forked once and inherits the workload (no copy, no pickling); each
    evaluation sends the knob values down a pipe and waits for the result at most the time
    limit, so a cheap evaluation costs a pipe round trip, not a fork. An evaluation that
    overruns its time, or whose process dies (a crash, an allocation the memory cap did not
    catch), becomes an infeasible result with the reason; the child is then killed and a new
    one forked for the next evaluation, and the caller's process is never at risk.

    Args:
        ctx: The study's shared evaluation context.
        requests: The workload.
        memory_limit_mb: Memory one evaluation may allocate (``None``: no limit).
    """

    def __init__(
        self, ctx: EvalContext, requests: Sequence[Request], memory_limit_mb: int | None
    ) -> None:
        self._ctx = ctx
        self._requests = requests
        self._memory_mb = memory_limit_mb
        self._process: Any = None
        self._conn: Any = None
        self._last_exitcode: int | None = None

    def _start(self) -> None:
        import multiprocessing

        mp = multiprocessing.get_context("fork")  # shares the workload; Linux (and macOS) only
        parent, child = mp.Pipe(duplex=True)
        self._process = mp.Process(
            target=_child_main,
            args=(child, self._ctx, self._requests, self._memory_mb),
            name="dynosim-evaluation",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._conn = parent

    def evaluate(self, params: Params, timeout_s: float | None) -> TrialResult:
        """Evaluate ``params`` in the child, waiting at most ``timeout_s``."""
        if self._process is None or not self._process.is_alive():
            self._start()
        t0 = time.perf_counter()
        why: str | None = None
        try:
            self._conn.send(params)
            if self._conn.poll(timeout_s):
                result: TrialResult = self._conn.recv()
                return result
            why = timeout_reason(timeout_s or 0.0)
        except (EOFError, BrokenPipeError, ConnectionResetError):  # the child died
            pass
        self.stop()
        if why is None:
            why = _death_reason(self._last_exitcode, self._memory_mb)
        return failed_result(self._ctx, params, why, time.perf_counter() - t0)

    def stop(self) -> None:
        """Kill the child (if any) and forget it."""
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join()
            self._last_exitcode = self._process.exitcode
            self._conn.close()
        self._process = self._conn = None


def _death_reason(exitcode: int | None, memory_limit_mb: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        import signal

        how = f"signal {signal.Signals(-exitcode).name}"
    else:
        how = f"exit code {exitcode}"
    cap = f" under the memory limit of {memory_limit_mb} MiB" if memory_limit_mb else ""
    return f"evaluation process died ({how}){cap}"


def _child_main(
    conn: Any, ctx: EvalContext, requests: Sequence[Request], memory_limit_mb: int | None
) -> None:
    """The forked child: evaluate each knob assignment received, send the result back."""
    _die_with_parent()
    while True:
        try:
            params = conn.recv()
        except EOFError:  # the parent closed the pipe
            return
        try:
            with memory_cap(memory_limit_mb):
                result = within_memory(evaluate_one(ctx, params, requests), ctx, memory_limit_mb)
        except MemoryError as exc:  # outside evaluate_one's own handler (scoring, copying)
            why = f"exceeded the memory limit of {memory_limit_mb} MiB (MemoryError: {exc})"
            result = failed_result(ctx, params, why, 0.0)
        conn.send(result)


def _die_with_parent() -> None:
    """Linux: have the kernel kill this child when its parent dies (no orphaned hang)."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
