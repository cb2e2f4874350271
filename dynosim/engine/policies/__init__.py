"""Backend scheduling policies: which requests each engine step holds.

One :class:`~dynosim.engine.worker.EngineWorker` subclass per policy. :data:`WORKER_CLASSES`
names the one each backend schedules with; :func:`worker_class` also reads the one engine
setting that changes it.
"""

from __future__ import annotations

from dynosim.config import Backend, CapacityPolicy
from dynosim.engine.policies.sglang import SglangWorker
from dynosim.engine.policies.vllm import TrtllmPackingWorker, TrtllmWorker, VllmWorker
from dynosim.engine.worker import EngineWorker

__all__ = [
    "WORKER_CLASSES", "SglangWorker", "TrtllmPackingWorker", "TrtllmWorker", "VllmWorker",
    "worker_class",
]  # fmt: skip

WORKER_CLASSES: dict[Backend, type[EngineWorker]] = {
    "vllm": VllmWorker,
    "sglang": SglangWorker,
    "trtllm": TrtllmWorker,
}
"""The worker class that schedules as each backend does by default."""


def worker_class(
    backend: Backend, capacity_policy: CapacityPolicy | None = None
) -> type[EngineWorker]:
    """The worker class that schedules as ``backend`` does with ``capacity_policy``."""
    if backend == "trtllm" and capacity_policy == "MAX_UTILIZATION":
        return TrtllmPackingWorker  # packs and pauses the newest on a shortage: vLLM's policy
    return WORKER_CLASSES[backend]
