"""Backend scheduling policies: which requests each engine step holds.

One :class:`~dynosim.engine.worker.EngineWorker` subclass per policy; :func:`worker_class`
picks it from the backend and its engine settings.
"""

from __future__ import annotations

from dynosim.engine.policies.sglang import SglangWorker
from dynosim.engine.policies.vllm import TrtllmWorker, VllmWorker
from dynosim.engine.worker import EngineWorker

__all__ = ["SglangWorker", "TrtllmWorker", "VllmWorker", "worker_class"]


def worker_class(backend: str, capacity_policy: str | None = None) -> type[EngineWorker]:
    """The worker class that schedules as ``backend`` does."""
    if backend == "sglang":
        return SglangWorker
    if backend == "trtllm":
        # MAX_UTILIZATION packs and pauses the newest on a shortage: vLLM's policy
        return VllmWorker if capacity_policy == "MAX_UTILIZATION" else TrtllmWorker
    return VllmWorker
