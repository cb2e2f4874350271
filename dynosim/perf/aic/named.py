"""AIConfigurator failures that name the op, the shape and the data that is missing.

AIConfigurator (``aiconfigurator_core``) raises "No empirical utilization data to estimate this
op at query=[32.0, 16.0, 1.0]" when its database has no measurement near a query and HYBRID
mode has no utilisation factor to scale its speed-of-light estimate by; the message names
neither the op nor the deployment. :class:`NamedOps` wraps an engine handle so that the
message a study records as the trial's infeasible reason does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dynosim.perf.aic.key import AicKey


class NamedOps:
    """An engine handle whose failures name the op, the shape and the data that is missing.

    AIConfigurator's own message names neither the op nor the deployment ("No empirical
    utilization data to estimate this op at query=[32.0, 16.0, 1.0]"). When a call fails, each
    op of it is evaluated alone at the same shape to find the one without data; its name is
    read at a shape it has data for (``batch_size=1, s=16``, where the op list is probed).
    """

    def __init__(self, own: Any, key: AicKey) -> None:
        self._own, self._key = own, key

    def evaluate_context_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        """The context ops at ``idx`` (AIConfigurator's ``evaluate_context_ops``)."""
        return self._call("context", idx, kw)

    def evaluate_generation_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        """The generation ops at ``idx`` (AIConfigurator's ``evaluate_generation_ops``)."""
        return self._call("generation", idx, kw)

    def _call(self, phase: str, idx: list[int], kw: dict[str, Any]) -> list[Any]:
        evaluate = getattr(self._own, f"evaluate_{phase}_ops")
        try:
            return list(evaluate(idx, **kw))
        except Exception as err:
            if "out of range" in str(err):  # the end of the op list (see probe_ops)
                raise
            raise RuntimeError(self._why(phase, evaluate, idx, kw, err)) from None

    def _why(
        self, phase: str, evaluate: Callable[..., list[Any]], idx: list[int],
        kw: dict[str, Any], err: Exception,
    ) -> str:  # fmt: skip
        culprit = next((i for i in idx if _fails(evaluate, [i], kw)), None)
        if culprit is None:
            name = f"{phase} ops {idx}"
        elif not _fails(evaluate, [culprit], {"batch_size": 1, "s": 16}):
            name = str(evaluate([culprit], batch_size=1, s=16)[0][0])
        else:
            names = spec_op_names(self._own, phase)
            name = names[culprit] if culprit < len(names) else f"{phase} #{culprit}"
        shape = ", ".join(f"{_SHAPE.get(k, k)} {v}" for k, v in kw.items())
        k = self._key
        where = (f"{k.backend} {k.backend_version} on {k.gpu}, {k.dtype} weights, "
                 f"{k.kv_dtype} KV cache, tp {k.tp}")  # fmt: skip
        if k.ep > 1 or k.moe_tp > 1:
            where += f", ep {k.ep}, moe_tp {k.moe_tp}"
        said = " ".join(str(err).split())[:400]
        return (
            f"op {name} at {shape}: AIConfigurator's database ({where}) has no measurement "
            f"of it there and cannot estimate one ({said})"
        )


_SHAPE = {"batch_size": "batch", "s": "tokens", "x": "tokens", "prefix": "cached prefix"}
"""AIConfigurator's query arguments, as the message names them."""


def spec_op_names(handle: Any, phase: str) -> list[str]:
    """The op names of ``phase`` in the order of the handle's compiled spec ([] if unknown).

    aiconfigurator_core's ``EngineHandle.spec_bytes`` holds a JSON header and then each op
    record with its name (``context_embedding``, ``context_add_norm_1``, ...), in the order
    ``evaluate_*_ops`` numbers them. It is not a documented format: anything unexpected gives
    no names, and the message falls back to the op's index.
    """
    raw = getattr(handle, "spec_bytes", None)
    try:
        data = raw() if callable(raw) else raw
    except Exception:
        return []
    if not isinstance(data, bytes):
        return []
    names = re.findall(rb"(?:context|generation)_[a-z0-9_]+", data)
    return [n.decode() for n in names if n.startswith(phase.encode())]


def _fails(evaluate: Callable[..., list[Any]], idx: list[int], kw: dict[str, Any]) -> bool:
    try:
        evaluate(idx, **kw)
    except Exception:
        return True
    return False
