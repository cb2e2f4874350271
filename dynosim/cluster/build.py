"""Building the cluster of one run: its worker pools, the speculative plan, the observation tick.

:class:`dynosim.simulation.Simulation` calls these in this order while it is being built; the
callbacks it passes (a pool's finished legs, whether a request is still open) are its own.
Every router shares the run's one random generator, and the speculative plan's draws come from
the run's seed, so the same deployment with the same seed is built, and runs, the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import simpy

from dynosim.cluster.planner import Observer, Planner, PoolSample
from dynosim.cluster.pool import WorkerPool
from dynosim.config import DeploymentConfig, PoolName
from dynosim.engine.batch import FinishCallback
from dynosim.engine.policies import worker_class
from dynosim.errors import ConfigError
from dynosim.perf.speculative import extra_blocks, verify_steps
from dynosim.router import make_router
from dynosim.types import Request
from dynosim.workload.release import to_us

if TYPE_CHECKING:
    from dynosim.perf.deployment import DeploymentPerf

__all__ = ["build_observer", "build_pools", "speculative_plan"]


def build_pools(
    config: DeploymentConfig,
    env: simpy.Environment,
    rng: np.random.Generator,
    perfs: Mapping[PoolName, DeploymentPerf],
    *,
    fast_forward: bool,
    on_prefilled: FinishCallback,
    on_finish: FinishCallback,
) -> dict[PoolName, WorkerPool]:
    """The worker pools, prefill first: each with its router and scheduling policy.

    The prefill pool's finished legs go to ``on_prefilled``, every other pool's to
    ``on_finish``.
    """
    pools: dict[PoolName, WorkerPool] = {}
    for name, pool in config.pools():
        router = config.decode_router if name == "decode" else config.router
        pools[name] = WorkerPool(
            name,
            env,
            tp=pool.tp,
            workers=pool.workers * pool.attention_dp,  # one scheduler per DP rank
            engine=pool.engine,
            perf=perfs[name],
            router=make_router(config, rng, router),
            on_finish=on_prefilled if name == "prefill" else on_finish,
            fast_forward=fast_forward,
            worker_cls=worker_class(config.backend, pool.engine.capacity_scheduler_policy),
        )
        if pool.attention_dp > 1 and _ranks_step_together(config):
            pools[name].step_together(pool.attention_dp)
    return pools


def _ranks_step_together(config: DeploymentConfig) -> bool:
    """Whether the attention-DP ranks of a replica run their forward passes together.

    SGLang's DP attention and TensorRT-LLM's attention DP gather the ranks' tokens for the
    layers after attention in every forward; vLLM's data-parallel ranks do only for a MoE
    model ("Forward passes must be aligned, and expert layers across all ranks are required to
    synchronize during every forward pass", vLLM's data-parallel deployment guide): for a dense
    one they are independent engines. A model outside the catalog (step times given directly)
    is taken as MoE.
    """
    if config.backend != "vllm":
        return True
    from dynosim.perf.catalog import model_spec  # lazily: only vLLM attention-DP replicas ask

    try:
        return model_spec(config.model).is_moe
    except ConfigError:
        return True


def speculative_plan(
    config: DeploymentConfig, requests: Sequence[Request], seed: int, block_size: int
) -> tuple[np.ndarray | None, np.ndarray]:
    """Speculative decoding: each request's verify steps (None: off) and extra KV blocks.

    ``block_size`` is the decode pool's KV block size.
    """
    n = len(requests)
    spec = config.speculative
    if spec is None or spec.num_speculative_tokens <= 0 or not n:
        return None, np.zeros(n, dtype=np.int64)
    outs = np.fromiter((r.output_tokens for r in requests), np.int64, n)
    ins = np.fromiter((r.input_tokens for r in requests), np.int64, n)
    steps = verify_steps(outs, spec, seed)
    return steps, extra_blocks(ins, outs, steps, block_size)


def build_observer(
    config: DeploymentConfig,
    env: simpy.Environment,
    pools: Mapping[PoolName, WorkerPool],
    planner: Planner | None,
    timeline: Mapping[str, list[PoolSample]],
    sample_interval_s: float | None,
    busy: Callable[[], bool],
) -> Observer:
    """The pools' observation tick: at the planner's pace, and the timeline's.

    The timeline samples at ``sample_interval_s`` if given, else it is the planner's.
    """
    plan_us, adjust_us = None, 0
    planner_config = config.planner
    if planner_config is not None:
        pull = min(planner_config.metric_pulling_interval_s, planner_config.adjustment_interval_s)
        plan_us = max(1, to_us(pull))
        adjust_us = to_us(planner_config.adjustment_interval_s)
    sample_us = None if sample_interval_s is None else max(1, to_us(sample_interval_s))
    return Observer(
        env,
        pools,
        planner,
        timeline,
        plan_us=plan_us,
        adjust_us=adjust_us,
        sample_us=sample_us,
        busy=busy,
    )
