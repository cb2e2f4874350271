"""Where evaluations run: the :class:`Evaluator` seam and the in-process :class:`LocalEvaluator`.

:class:`LocalEvaluator` runs :func:`~search.run.evaluate.evaluate_one` in the driver (tests,
debugging), or, with a trial time limit or a memory limit, in a forked child
(:class:`~search.run.bounded.BoundedChild`) that is killed when it overruns; a hang or a
runaway allocation becomes an infeasible result with the reason. ``search.run.ray_evaluator``
runs it as Ray tasks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from search.run.bounded import BoundedChild
from search.run.evaluate import EvalContext, evaluate_one
from search.trial import Params, TrialResult

if TYPE_CHECKING:
    from dynosim.types import Request


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

    def submit(self, tag: int, params: Params, *, hint: float | None = None) -> None:
        """Start evaluating ``params``; its result comes back with ``tag``.

        ``hint``: in capacity mode, the level the capacity search starts from.
        """
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
        self._queue: deque[tuple[int, Params, float | None]] = deque()
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

    def submit(self, tag: int, params: Params, *, hint: float | None = None) -> None:
        """Queue ``params``; it runs on the next ``wait``."""
        self._queue.append((tag, params, hint))

    def wait(self) -> list[tuple[int, TrialResult]]:
        """Run the oldest queued evaluation."""
        if not self._queue:
            return []
        tag, params, hint = self._queue.popleft()
        if self._timeout_s is None and self._memory_mb is None:
            return [(tag, evaluate_one(self._ctx, params, self._requests, hint=hint))]
        if self._child is None:
            self._child = BoundedChild(self._ctx, self._requests, self._memory_mb)
        return [(tag, self._child.evaluate(params, self._timeout_s, hint=hint))]

    def close(self) -> None:
        """Drop anything queued; stop the child process."""
        self._queue.clear()
        if self._child is not None:
            self._child.stop()
            self._child = None
