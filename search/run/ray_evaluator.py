"""Evaluation as Ray tasks: asynchronous, workload shipped once, worker deaths retried.

``ray`` is imported inside :class:`RayEvaluator` so that nothing else pays for it. Each config is
one ``ray.remote`` task running :func:`search.run.evaluate.evaluate_one`; the workload and the
shared context are ``ray.put`` once and passed by reference, and each worker process unpickles
the workload once. Half as many tasks again as there are CPUs are kept in flight, so a CPU
never idles while the driver records a result and submits the next. Ray re-runs a task whose worker
process dies (``max_retries``); if it still cannot finish, the trial is recorded as infeasible
with the reason and the study goes on.

Bounds: a task running longer than the trial time limit is cancelled (``ray.cancel(force=True)``
kills its worker; Ray does not retry it) and recorded as infeasible with the reason; with a
memory limit each task caps its worker's address space for the evaluation
(:func:`search.run.bounded.memory_cap`), so a runaway allocation fails that trial instead of
exhausting the node. A cluster that cannot be reached is a one-line ``ConfigError``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dynosim.errors import ConfigError
from search.run.bounded import memory_cap, timeout_reason, within_memory
from search.run.evaluate import EvalContext, evaluate_one, failed_result
from search.trial import Params, TrialResult

if TYPE_CHECKING:
    from dynosim.types import Request


_WORKLOAD: dict[str, Sequence[Request]] = {}
"""The workload of the study this worker process last served, unpickled once per process."""


CONNECT_TIMEOUT_S = 3.0
"""How long to wait for a cluster's head to accept a connection before giving up."""


def _run(
    ctx: EvalContext,
    params: Params,
    hint: float | None,
    boxed_requests: list[Any],
    memory_limit_mb: int | None,
) -> TrialResult:
    requests = _WORKLOAD.get(ctx.workload_id)
    if requests is None:
        import ray

        requests = ray.get(boxed_requests[0])
        _WORKLOAD.clear()
        _WORKLOAD[ctx.workload_id] = requests
    if memory_limit_mb is None:
        return evaluate_one(ctx, params, requests, hint=hint)
    try:
        with memory_cap(memory_limit_mb):
            result = evaluate_one(ctx, params, requests, hint=hint)
    except MemoryError as exc:  # outside evaluate_one's own handler
        why = f"exceeded the memory limit of {memory_limit_mb} MiB (MemoryError: {exc})"
        return failed_result(ctx, params, why, 0.0)
    return within_memory(result, ctx, memory_limit_mb)


class RayEvaluator:
    """Runs evaluations on a local Ray runtime or an existing cluster.

    Args:
        ctx: The study's shared evaluation context.
        requests: The workload, put in the object store once.
        address: ``None`` starts a local runtime; ``"auto"`` or ``"HOST:PORT"`` joins a cluster.
        num_cpus: CPUs of a local runtime (default: all); ignored when joining a cluster.
        max_retries: Times Ray re-runs a task whose worker died.
        trial_timeout_s: Wall time one task may run (``None``: no limit), counted from when
            it could start: Ray runs a driver's tasks about in submission order, so the
            oldest tasks, one per CPU, are taken to be the running ones.
        memory_limit_mb: Memory one evaluation may allocate in its worker (``None``: no
            limit).

    Raises:
        ConfigError: ``address`` names no reachable Ray cluster.
    """

    def __init__(
        self,
        ctx: EvalContext,
        requests: Sequence[Request],
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        max_retries: int = 3,
        trial_timeout_s: float | None = None,
        memory_limit_mb: int | None = None,
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
                root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": _pythonpath(root)}}
                _quiet_token_auth_notice()
                ray.init(**kwargs)
            else:
                kwargs["address"] = address
                _connect(ray, address, kwargs)
        self._ctx_ref: Any = ray.put(ctx)
        self._requests_ref: Any = ray.put(tuple(requests))
        self._task = ray.remote(num_cpus=1, max_retries=max_retries)(_run)
        self._refs: dict[Any, tuple[int, Params]] = {}
        self._timeout_s = trial_timeout_s
        self._memory_mb = memory_limit_mb
        self._started: dict[Any, float] = {}  # tasks taken to be running -> since when
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))  # type: ignore[no-untyped-call,unused-ignore]
        self._cpus = cpus
        self._capacity = cpus + max(1, cpus // 2)

    @property
    def capacity(self) -> int:
        """Tasks kept in flight: one per CPU plus a queue, so no CPU waits for the driver."""
        return self._capacity

    @property
    def in_flight(self) -> int:
        """Tasks submitted and not yet returned."""
        return len(self._refs)

    def submit(self, tag: int, params: Params, *, hint: float | None = None) -> None:
        """Start a task for ``params`` (``hint``: a capacity search's first level)."""
        # The workload ref travels boxed in a list so Ray does not unpickle it for every task;
        # each worker process fetches it once (see _run).
        ref = self._task.remote(self._ctx_ref, params, hint, [self._requests_ref], self._memory_mb)
        self._refs[ref] = (tag, params)

    def wait(self) -> list[tuple[int, TrialResult]]:
        """Block until at least one task is done; return every finished one."""
        if not self._refs:
            return []
        ray = self._ray
        out = self._cancel_overdue()
        if out:
            return out
        refs = list(self._refs)
        ready, rest = ray.wait(refs, num_returns=1, timeout=self._until_overdue())
        while not ready:  # only with a time limit: some task may be overdue now
            out = self._cancel_overdue()
            if out:
                return out
            ready, rest = ray.wait(refs, num_returns=1, timeout=self._until_overdue())
        if rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        for ref in ready:
            tag, params = self._refs.pop(ref)
            self._started.pop(ref, None)
            try:
                out.append((tag, ray.get(ref)))
            except ray.exceptions.RayError as exc:
                out.append((tag, self._lost(params, exc)))
        return out

    def _until_overdue(self) -> float | None:
        """Seconds until the next running task reaches the time limit (``None``: no limit)."""
        if self._timeout_s is None:
            return None
        self._start_clocks()
        first = min(self._started.values(), default=time.monotonic())
        return max(0.01, first + self._timeout_s - time.monotonic())

    def _start_clocks(self) -> None:
        """Start the clock of the oldest tasks, up to one per CPU, that have none yet."""
        now = time.monotonic()
        for ref in self._refs:  # submission order
            if len(self._started) >= self._cpus:
                return
            self._started.setdefault(ref, now)

    def _cancel_overdue(self) -> list[tuple[int, TrialResult]]:
        """Cancel (kill) every task past the time limit; their results say so."""
        if self._timeout_s is None:
            return []
        self._start_clocks()
        now = time.monotonic()
        out: list[tuple[int, TrialResult]] = []
        for ref, since in list(self._started.items()):
            if now - since < self._timeout_s:
                continue
            self._ray.cancel(ref, force=True)
            del self._started[ref]
            tag, params = self._refs.pop(ref)
            why = timeout_reason(self._timeout_s)
            out.append((tag, failed_result(self._ctx, params, why, now - since)))
        return out

    def _lost(self, params: Params, exc: Exception) -> TrialResult:
        why = f"evaluation lost after retries: {type(exc).__name__}"
        if self._memory_mb is not None:
            why += f" (memory limit {self._memory_mb} MiB)"
        return failed_result(self._ctx, params, why, 0.0)

    def close(self) -> None:
        """Cancel in-flight tasks; shut Ray down if this evaluator started it."""
        for ref in self._refs:
            self._ray.cancel(ref, force=True)
        self._refs.clear()
        self._started.clear()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


def _connect(ray: Any, address: str, kwargs: dict[str, Any]) -> None:
    """Join the cluster at ``address``, or fail fast with one line saying what to do.

    The token is found as Ray's own clients on this machine find it: ``ray.init()`` and ``ray
    start`` without an address turn token authentication on when ``RAY_AUTH_MODE`` is unset
    and a token exists (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``;
    ``maybe_enable_token_auth_if_token_available`` in Ray 2.60's
    ``ray/_private/authentication/authentication_token_setup.py``), but ``ray.init(address=...)``
    does not, so a head started with plain ``ray start --head`` refused us. We do the same for
    an explicit address; a head without authentication ignores the token. ``RAY_AUTH_MODE`` set
    by the user is respected.

    Raises:
        ConfigError: Nothing answers at ``address``, it refuses this machine's token, it is
            not a Ray cluster, or (``auto``) no cluster runs on this machine.
    """
    local = "start one with `ray start --head`, or drop --ray-address (executor.address) "
    local += "to run on a local Ray runtime (`--ray-address local` on resume)"
    if address != "auto":
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S):
                pass
        except (OSError, ValueError) as exc:
            why = f"a reachable Ray head node (connecting failed: {exc}); {local}"
            raise ConfigError("executor.address", address, why) from None
    _quiet_token_auth_notice()
    _use_machine_token()
    if address != "auto" and not address.startswith("ray://"):
        _check_token(address)
    try:
        ray.init(**kwargs)
    except (ConnectionError, TimeoutError, ValueError, ray.exceptions.RayError) as exc:
        if ray.is_initialized():
            ray.shutdown()
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if address == "auto":
            why = f"a running Ray cluster (none found on this machine); {local}"
        else:
            why = f"a Ray cluster ({type(exc).__name__}: {first}); {local}"
        raise ConfigError("executor.address", address, why) from None


TOKEN_FIX = (
    "put the head's token (`ray get-auth-token` on the head node) in ~/.ray/auth_token on this "
    "machine or in RAY_AUTH_TOKEN, or start the head with RAY_AUTH_MODE=disabled"
)
"""What to do when a head refuses this machine's token (Ray 2.60's token-auth guide)."""


def _use_machine_token() -> None:
    """Turn token authentication on when this machine has a Ray token (see :func:`_connect`)."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _check_token(address: str) -> None:
    """Ask the head's GCS one question to learn at once whether it accepts our token.

    ``ray.init`` against a head that refuses the token retries for ~20 s, logging one
    ``InvalidAuthToken`` line a second, and then raises a ``ConnectionError`` that does not
    mention authentication. A GCS client given a dummy cluster id is answered within
    milliseconds: ``WrongClusterID`` once the token is accepted, ``InvalidAuthToken`` when it is
    not (the GCS checks the token first). Any other outcome is left to ``ray.init``.

    Raises:
        ConfigError: The head refused this machine's token (or the lack of one).
    """
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return
    try:
        client = GcsClient(address=address, cluster_id="0" * 56)
        client.internal_kv_get(b"dynosim-probe", None, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:  # only an authentication refusal is ours to report
        if "InvalidAuthToken" in str(exc):
            why = f"a Ray head that accepts this machine's token (it refused it); {TOKEN_FIX}"
            raise ConfigError("executor.address", address, why) from None


def _quiet_token_auth_notice() -> None:
    """Drop Ray's "token authentication is enabled" notice.

    Ray (2.5x, ``ray/_private/authentication/authentication_token_setup.py``) turns token
    authentication on for every new local cluster, and for a client of a cluster when this
    machine has a token, and logs that each time; it is not the user's business (a local
    runtime is private to this process; the head decides for a cluster). Authentication stays
    on.
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
