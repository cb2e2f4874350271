"""Bounded evaluations: a time limit and a memory cap, in a forked child process.

With a trial time limit or a memory limit, each evaluation runs in a forked child
(:class:`BoundedChild`) that is killed when it overruns and whose address space is capped
(:func:`memory_cap`); a hang or a runaway allocation becomes an infeasible result with the
reason ("exceeded the trial time limit of N s", "exceeded the memory limit of N MiB").
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from search.run.evaluate import EvalContext, evaluate_one, failed_result
from search.trial import Params, TrialResult

if TYPE_CHECKING:
    from dynosim.types import Request


def timeout_reason(timeout_s: float) -> str:
    """The reason recorded for an evaluation cancelled at its time limit."""
    return f"exceeded the trial time limit of {timeout_s:g} s"


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

    def evaluate(
        self, params: Params, timeout_s: float | None, *, hint: float | None = None
    ) -> TrialResult:
        """Evaluate ``params`` in the child, waiting at most ``timeout_s``."""
        if self._process is None or not self._process.is_alive():
            self._start()
        t0 = time.perf_counter()
        why: str | None = None
        try:
            self._conn.send((params, hint))
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
            params, hint = conn.recv()
        except EOFError:  # the parent closed the pipe
            return
        try:
            with memory_cap(memory_limit_mb):
                result = within_memory(
                    evaluate_one(ctx, params, requests, hint=hint), ctx, memory_limit_mb
                )
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
