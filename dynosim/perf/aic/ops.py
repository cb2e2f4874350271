"""AIConfigurator's op lists, and engine handles that take some ops from another handle.

:func:`probe_ops` walks a compiled engine's op list one op at a time. :class:`OpsFrom` is an
engine handle whose ops at some positions are evaluated by another handle: the measured
kernels of another shape (:func:`dynosim.perf.aic.build._moe_as_expert_parallel`) or of
another backend whose kernel is the one that runs (:func:`borrowed_ops`: vLLM's FlashInfer
kernels are TensorRT-LLM's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dynosim.errors import ConfigError

LACKS_DATA = "AIConfigurator lacks data"
PHASES = ("context", "generation")


def probe_ops(evaluate: Callable[[list[int]], list[Any]]) -> list[Any]:
    """Every op of an op list, one at a time: ``(name, ms, ..., source)`` of each.

    Raises:
        ConfigError: AIConfigurator lacks data for one of the ops.
    """
    ops: list[Any] = []
    for i in range(256):
        try:
            ops.append(evaluate([i])[0])
        except Exception as err:
            if "out of range" in str(err):
                break  # the end of the op list
            reason = " ".join(str(err).split())[:700]
            raise ConfigError("timing", "aic", f"roofline ({LACKS_DATA}: {reason})") from None
    return ops


def op_names(h: Any, phase: str) -> list[str]:
    """The names of ``h``'s ``phase`` ops, in order (probed at one request of 16 tokens)."""
    evaluate = getattr(h, f"evaluate_{phase}_ops")
    return [str(op[0]) for op in probe_ops(lambda idx: evaluate(idx, batch_size=1, s=16))]


class OpsFrom:
    """An engine handle whose ops at some positions are evaluated by another handle.

    ``moved[phase]`` maps a position of the own op list to the position of the op that times
    it in the proxy's. The results are the own handle's ops, then the proxy's (not in ``idx``
    order): the callers sum their times or ask for one op at a time.
    """

    def __init__(self, own: Any, proxy: Any, moved: Mapping[str, Mapping[int, int]]) -> None:
        self._own, self._proxy = own, proxy
        self._moved = {phase: dict(moved.get(phase, {})) for phase in PHASES}

    def evaluate_context_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        """The context ops at ``idx`` (AIConfigurator's ``evaluate_context_ops``)."""
        return self._split("context", idx, kw)

    def evaluate_generation_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        """The generation ops at ``idx`` (AIConfigurator's ``evaluate_generation_ops``)."""
        return self._split("generation", idx, kw)

    def _split(self, phase: str, idx: list[int], kw: dict[str, Any]) -> list[Any]:
        moved = self._moved[phase]
        name = f"evaluate_{phase}_ops"
        mine = [i for i in idx if i not in moved]
        theirs = [moved[i] for i in idx if i in moved]
        # Callers sum the times (AIConfigurator may return one entry for ops of one name).
        own = getattr(self._own, name)(mine, **kw) if mine else []
        return [*own, *(getattr(self._proxy, name)(theirs, **kw) if theirs else [])]


def borrowed_ops(own: Any, proxy: Any, take: Callable[[str], bool]) -> OpsFrom:
    """``own`` with every op whose name ``take`` accepts timed by ``proxy``'s op of that name.

    Both handles list the same model: the ``n``-th op of a name in one is the ``n``-th of that
    name in the other.

    Raises:
        ConfigError: ``proxy`` has no op of that name (another op list).
    """
    moved: dict[str, dict[int, int]] = {}
    for phase in PHASES:
        mine, theirs = op_names(own, phase), op_names(proxy, phase)
        where: dict[str, list[int]] = {}
        for j, name in enumerate(theirs):
            where.setdefault(name, []).append(j)
        seen: dict[str, int] = {}
        moved[phase] = {}
        for i, name in enumerate(mine):
            if not take(name):
                continue
            n = seen.get(name, 0)
            seen[name] = n + 1
            if n >= len(where.get(name, ())):
                raise ConfigError(
                    "timing", "aic", f"roofline (no {name} op in TensorRT-LLM's op list)"
                )
            moved[phase][i] = where[name][n]
    return OpsFrom(own, proxy, moved)
