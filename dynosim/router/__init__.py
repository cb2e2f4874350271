"""Routers: which worker gets an arriving request. Routing is a synchronous call at arrival.

``round_robin`` and ``random`` ignore the workers' state; ``least_loaded``, ``kv_load`` and
``kv_aware`` (:mod:`dynosim.router.indexed`) read it through indexes kept as the workers
change, and pick what scanning every worker would (:mod:`dynosim.router.reference`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dynosim.config import DeploymentConfig, RouterName
from dynosim.router.base import RandomRouter, RoundRobin, Router, Stateless, kv_cost
from dynosim.router.indexed import KvAware, KvLoad, LeastLoaded
from dynosim.router.reference import KvAwareScan, KvLoadScan, LeastLoadedScan

__all__ = [
    "ROUTERS",
    "KvAware",
    "KvAwareScan",
    "KvLoad",
    "KvLoadScan",
    "LeastLoaded",
    "LeastLoadedScan",
    "RandomRouter",
    "RoundRobin",
    "Router",
    "Stateless",
    "kv_cost",
    "make_router",
]

ROUTERS: dict[RouterName, Callable[[DeploymentConfig, np.random.Generator], Router]] = {
    "round_robin": lambda config, rng: RoundRobin(),
    "random": lambda config, rng: RandomRouter(rng),
    "least_loaded": lambda config, rng: LeastLoaded(sync_ties=config.max_local_prefill_tokens > 0),
    "kv_load": lambda config, rng: KvLoad(),
    "kv_aware": lambda config, rng: KvAware(
        config.kv_router.overlap_weight, config.kv_router.temperature, rng
    ),
}
"""Each router by name, built from the deployment (its KV router settings) and the run's RNG."""


def make_router(
    config: DeploymentConfig, rng: np.random.Generator, name: RouterName | None = None
) -> Router:
    """The router ``name`` (default: the deployment's ``router``)."""
    return ROUTERS[config.router if name is None else name](config, rng)
