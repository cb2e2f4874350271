"""dynosim: a discrete-event simulator of LLM serving clusters.

``simulate(config, requests) -> Metrics`` runs one deployment on one workload.
"""

from dynosim.config import DeploymentConfig, EngineConfig, KVRouterConfig, SLOConfig
from dynosim.errors import ConfigError, DynosimError, InfeasibleError, WorkloadError
from dynosim.metrics import Metrics, Stat
from dynosim.moved import install
from dynosim.simulation import SimResult, Simulation, simulate
from dynosim.types import Request

__all__ = [
    "ConfigError",
    "DeploymentConfig",
    "DynosimError",
    "EngineConfig",
    "InfeasibleError",
    "KVRouterConfig",
    "Metrics",
    "Request",
    "SLOConfig",
    "SimResult",
    "Simulation",
    "Stat",
    "WorkloadError",
    "simulate",
]

install(
    {
        "dynosim.workload.synthetic": "dynosim.workload (WorkloadSpec and its parts in "
        "dynosim.workload.spec, generate in dynosim.workload.generate, workload files in "
        "dynosim.workload.files)",
    }
)
