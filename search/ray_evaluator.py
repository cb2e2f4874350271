"""Evaluation as Ray tasks: asynchronous, workload shipped once, worker deaths retried.

``ray`` is imported inside :class:`RayEvaluator` so that nothing else pays for it. Each config is
one ``ray.remote`` task running :func:`search.evaluator.evaluate_one`; the workload and the
shared context are ``ray.put`` once and passed by reference, and each worker process unpickles
the workload once. Half as many tasks again as there are CPUs are kept in flight, so a CPU
never idles while the driver records a result and submits the next. Ray re-runs a task whose worker
process dies (``max_retries``); if it still cannot finish, the trial is recorded as infeasible
with the reason and the study goes on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from search.evaluator import EvalContext, TrialResult, evaluate_one, prepare
from search.space import Params

if TYPE_CHECKING:
    from dynosim.types import Request


_WORKLOAD: dict[str, Sequence[Request]] = {}
"""The workload of the study this worker process last served, unpickled once per process."""


def _run(ctx: EvalContext, params: Params, boxed_requests: list[Any]) -> TrialResult:
    requests = _WORKLOAD.get(ctx.workload_id)
    if requests is None:
        import ray

        requests = ray.get(boxed_requests[0])
        _WORKLOAD.clear()
        _WORKLOAD[ctx.workload_id] = requests
    return evaluate_one(ctx, params, requests)


class RayEvaluator:
    """Runs evaluations on a local Ray runtime or an existing cluster.

    Args:
        ctx: The study's shared evaluation context.
        requests: The workload, put in the object store once.
        address: ``None`` starts a local runtime; ``"auto"`` or ``"HOST:PORT"`` joins a cluster.
        num_cpus: CPUs of a local runtime (default: all); ignored when joining a cluster.
        max_retries: Times Ray re-runs a task whose worker died.
    """

    def __init__(
        self,
        ctx: EvalContext,
        requests: Sequence[Request],
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        max_retries: int = 3,
    ) -> None:
        import ray

        self._ray = ray
        self._ctx = ctx
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {
                "include_dashboard": False,
                "logging_level": logging.WARNING,
                "configure_logging": True,
            }
            if address is None:  # always a fresh runtime, never a cluster found by accident
                kwargs["address"] = "local"
                kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
                # Workers must import search/ and dynosim/ the way the driver does.
                root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
                kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": _pythonpath(root)}}
                _quiet_token_auth_notice()
            else:
                kwargs["address"] = address
            ray.init(**kwargs)
        self._ctx_ref: Any = ray.put(ctx)
        self._requests_ref: Any = ray.put(tuple(requests))
        self._task = ray.remote(num_cpus=1, max_retries=max_retries)(_run)
        self._refs: dict[Any, tuple[int, Params]] = {}
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))  # type: ignore[no-untyped-call,unused-ignore]
        self._capacity = cpus + max(1, cpus // 2)

    @property
    def capacity(self) -> int:
        """Tasks kept in flight: one per CPU plus a queue, so no CPU waits for the driver."""
        return self._capacity

    @property
    def in_flight(self) -> int:
        """Tasks submitted and not yet returned."""
        return len(self._refs)

    def submit(self, tag: int, params: Params) -> None:
        """Start a task for ``params``."""
        # The workload ref travels boxed in a list so Ray does not unpickle it for every task;
        # each worker process fetches it once (see _run).
        ref = self._task.remote(self._ctx_ref, params, [self._requests_ref])
        self._refs[ref] = (tag, params)

    def wait(self) -> list[tuple[int, TrialResult]]:
        """Block until at least one task is done; return every finished one."""
        if not self._refs:
            return []
        ray = self._ray
        refs = list(self._refs)
        ready, rest = ray.wait(refs, num_returns=1)
        if rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        out: list[tuple[int, TrialResult]] = []
        for ref in ready:
            tag, params = self._refs.pop(ref)
            try:
                out.append((tag, ray.get(ref)))
            except ray.exceptions.RayError as exc:
                out.append((tag, self._lost(params, exc)))
        return out

    def _lost(self, params: Params, exc: Exception) -> TrialResult:
        _, data, digest, reason = prepare(self._ctx, params)
        why = reason or f"evaluation lost after retries: {type(exc).__name__}"
        score = self._ctx.problem.penalty(why)
        return TrialResult(
            params=dict(params),
            config=data,
            config_hash=digest,
            metrics={},
            values=score.values,
            constraints=score.constraints,
            feasible=False,
            reason=score.reason,
            seed=self._ctx.seed,
            wall_s=0.0,
        )

    def close(self) -> None:
        """Cancel in-flight tasks; shut Ray down if this evaluator started it."""
        for ref in self._refs:
            self._ray.cancel(ref, force=True)
        self._refs.clear()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


def _quiet_token_auth_notice() -> None:
    """Drop Ray's "token authentication is enabled" notice for the local runtime we start.

    Ray (2.5x, ``ray/_private/authentication/authentication_token_setup.py``) turns token
    authentication on for every new local cluster and logs that on each start; the cluster is
    private to this process, so the notice is not the user's business. Authentication stays on.
    """
    name = "ray._private.authentication.authentication_token_setup"
    logger = logging.getLogger(name)
    if not any(isinstance(f, _DropTokenNotice) for f in logger.filters):
        logger.addFilter(_DropTokenNotice())


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled")


def _pythonpath(root: str) -> str:
    parts = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return os.pathsep.join(dict.fromkeys(parts))
