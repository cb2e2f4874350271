"""What the simulator needs from the performance layer for one deployment, in one call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dynosim.config import DeploymentConfig, PoolName
from dynosim.errors import ConfigError, InfeasibleError
from dynosim.perf.catalog import gpu_spec
from dynosim.perf.factory import step_time_model
from dynosim.perf.hardware import GPUS_PER_NODE, NVLINK_LATENCY_US, RDMA_GBPS, RDMA_LATENCY_US
from dynosim.perf.memory import KVPool, check_feasible
from dynosim.perf.protocol import StepTimeModel


@dataclass(frozen=True, slots=True)
class DeploymentPerf:
    """Step-time model, KV blocks per worker and GPU price of a deployment.

    ``resolve`` derives it from a config; tests and what-if studies build one directly (e.g. a
    linear step-time model and a small KV pool), with no memory model behind it (``pool``).
    ``kv_bytes_per_token`` is what one TP rank stores per token (the KV transfer moves it).
    """

    timing: StepTimeModel
    kv_blocks: int
    gpu_hour_usd: float
    pool: KVPool | None = None
    kv_bytes_per_token: int = 0


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
    if price is None:  # no default price for this GPU: the cost metrics are NaN (unknown)
        price = float("nan")
    return DeploymentPerf(
        timing=step_time_model(config),
        kv_blocks=pool.total_kv_blocks,
        gpu_hour_usd=price,
        pool=pool,
        kv_bytes_per_token=pool.kv_bytes_per_token,
    )


def resolve_pools(
    config: DeploymentConfig, perf: Callable[[DeploymentConfig], DeploymentPerf] = resolve
) -> dict[PoolName, DeploymentPerf]:
    """Each pool's performance: ``perf`` of the deployment (agg) or of each pool's view of it.

    Raises:
        ConfigError, InfeasibleError: as ``resolve``; in disagg mode the field or message
            names the pool (``decode.tp``, "decode pool: ...").
    """
    if config.mode == "agg":
        return {"agg": perf(config)}
    out: dict[PoolName, DeploymentPerf] = {}
    for name, _ in config.pools():
        try:
            out[name] = perf(config.pool_view(name))
        except ConfigError as exc:
            raise ConfigError(f"{name}.{exc.field}", exc.value, exc.allowed) from None
        except InfeasibleError as exc:
            raise InfeasibleError(f"{name} pool: {exc}") from None
    return out


def kv_link(config: DeploymentConfig) -> tuple[float, float]:
    """Bandwidth (Gb/s per GPU) and per-transfer latency (us) of the KV-transfer link.

    Unset fields take the defaults of the link (see ``KVTransferConfig``): NVLink is the GPU's
    one-direction NVLink bandwidth from the catalog; ``auto`` picks NVLink when every GPU the
    deployment can hold fits in one node.

    Raises:
        ConfigError: unknown GPU.
    """
    t = config.kv_transfer
    link = t.link
    if link == "auto":
        link = "nvlink" if config.peak_gpus <= GPUS_PER_NODE else "rdma"
    if link == "nvlink":
        gbps = gpu_spec(config.gpu).nvlink_bytes_per_s * 8 / 1e9
        latency = NVLINK_LATENCY_US
    else:
        gbps, latency = RDMA_GBPS, RDMA_LATENCY_US
    return (
        t.gbps if t.gbps is not None else gbps,
        t.latency_us if t.latency_us is not None else latency,
    )
