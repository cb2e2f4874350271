"""What the simulator needs from the performance layer for one deployment, in one call."""

from __future__ import annotations

from dataclasses import dataclass

from dynosim.config import DeploymentConfig
from dynosim.perf.catalog import gpu_spec
from dynosim.perf.factory import step_time_model
from dynosim.perf.memory import KVPool, check_feasible
from dynosim.perf.protocol import StepTimeModel


@dataclass(frozen=True, slots=True)
class DeploymentPerf:
    """Step-time model, KV blocks per worker and GPU price of a deployment.

    ``resolve`` derives it from a config; tests and what-if studies build one directly (e.g. a
    linear step-time model and a small KV pool), with no memory model behind it (``pool``).
    """

    timing: StepTimeModel
    kv_blocks: int
    gpu_hour_usd: float
    pool: KVPool | None = None


def resolve(config: DeploymentConfig) -> DeploymentPerf:
    """Check feasibility, size the KV pool and build the step-time model.

    Raises:
        ConfigError: unknown model/GPU, TP that does not divide the heads, missing AIC data.
        InfeasibleError: the model does not fit in GPU memory.
    """
    pool = check_feasible(config)
    price = config.gpu_hour_usd
    if price is None:
        price = gpu_spec(config.gpu).gpu_hour_usd
    return DeploymentPerf(
        timing=step_time_model(config),
        kv_blocks=pool.total_kv_blocks,
        gpu_hour_usd=price,
        pool=pool,
    )
