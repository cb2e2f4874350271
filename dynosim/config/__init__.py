"""Deployment configuration: one serving configuration of a cluster, frozen and validated.

:class:`DeploymentConfig` (``deployment``) holds the sections: ``engine`` (per-worker engine
knobs), ``cluster`` (pools and their parallelism, routing, KV transfer, planner), ``host``
(host processes) and ``speculative`` (speculative decoding); ``serde`` reads and writes them
as plain data. Every public name is importable from ``dynosim.config``.
"""

from dynosim.config.cluster import (
    KVRouterConfig,
    KVTransferConfig,
    Link,
    PlannerConfig,
    PlannerPolicy,
    PoolConfig,
    PoolLimits,
    PoolName,
    RouterName,
)
from dynosim.config.deployment import (
    PER_POOL_FIELDS,
    AicDatabaseMode,
    DeploymentConfig,
    DType,
    Fp8Scales,
    KVDType,
    Mode,
    MoEActivation,
    SLOConfig,
    Timing,
)
from dynosim.config.engine import (
    BACKEND_ENGINE_FIELDS,
    BLOCK_SIZES,
    SGLANG_PAGE_SIZES,
    Backend,
    CapacityPolicy,
    EngineConfig,
    SchedulePolicy,
)
from dynosim.config.host import HOST_COUNT_BACKEND, SERVER_DEFAULT_HOST, HostConfig
from dynosim.config.speculative import (
    MTP_ACCEPTANCE,
    SpecMethod,
    SpecSampling,
    SpeculativeConfig,
)

__all__ = [
    "BACKEND_ENGINE_FIELDS",
    "BLOCK_SIZES",
    "HOST_COUNT_BACKEND",
    "MTP_ACCEPTANCE",
    "PER_POOL_FIELDS",
    "SERVER_DEFAULT_HOST",
    "SGLANG_PAGE_SIZES",
    "AicDatabaseMode",
    "Backend",
    "CapacityPolicy",
    "DType",
    "DeploymentConfig",
    "EngineConfig",
    "Fp8Scales",
    "HostConfig",
    "KVDType",
    "KVRouterConfig",
    "KVTransferConfig",
    "Link",
    "MoEActivation",
    "Mode",
    "PlannerConfig",
    "PlannerPolicy",
    "PoolConfig",
    "PoolLimits",
    "PoolName",
    "RouterName",
    "SLOConfig",
    "SchedulePolicy",
    "SpecMethod",
    "SpecSampling",
    "SpeculativeConfig",
    "Timing",
]
