"""The cluster sections: worker pools and their parallelism, routing, KV transfer, planner.

:func:`check_tp` and :func:`check_parallel` are the parallelism checks a pool and an
aggregated deployment share (``DeploymentConfig`` runs them on its own top-level fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from dynosim.checks import choice, integer, number
from dynosim.config.engine import EngineConfig
from dynosim.errors import ConfigError

RouterName = Literal["round_robin", "random", "least_loaded", "kv_aware", "kv_load"]
Link = Literal["auto", "nvlink", "rdma"]
PlannerPolicy = Literal["load", "sla"]
PoolName = Literal["agg", "prefill", "decode"]


def check_tp(name: str, value: object) -> None:
    """Tensor parallelism: a power of two in [1, 64]."""
    integer(name, value, 1, 64)
    assert isinstance(value, int)
    if value & (value - 1):
        raise ConfigError(name, value, "a power of two (1, 2, 4, 8, ...)")


def moe_tp_size(tp: int, ep: int, moe_tp: int | None, attention_dp: int) -> int:
    """Tensor parallelism inside each expert: ``moe_tp``, or ``tp x attention_dp / ep``."""
    return moe_tp if moe_tp is not None else tp * attention_dp // ep


def check_parallel(tp: int, ep: object, moe_tp: object, attention_dp: object) -> None:
    """Expert parallelism, expert TP and attention DP of one engine replica.

    A replica has ``tp x attention_dp`` GPUs; its MoE layers spread over the same GPUs as
    ``moe_tp x ep`` (so ``moe_tp`` defaults to ``tp x attention_dp / ep``).
    """
    integer("attention_dp", attention_dp, 1, 1024)
    integer("ep", ep, 1, 1024)
    assert isinstance(ep, int)
    assert isinstance(attention_dp, int)
    gpus = tp * attention_dp
    if moe_tp is None:
        if gpus % ep:
            raise ConfigError(
                "ep", ep, f"a divisor of tp x attention_dp ({tp} x {attention_dp} = {gpus})"
            )
        return
    integer("moe_tp", moe_tp, 1, 1024)
    assert isinstance(moe_tp, int)
    if moe_tp * ep != gpus:
        want = f"{gpus // ep}" if gpus % ep == 0 else "none"
        raise ConfigError(
            "moe_tp", moe_tp, f"{want}: moe_tp x ep = tp x attention_dp, the replica's {gpus} "
            f"GPUs (ep {ep})"
        )  # fmt: skip


MIN_INTERVAL_S = 0.01
"""Shortest period of a recurring simulated event (a planner's adjustment or metric pull, a
timeline sample). An engine step takes milliseconds, so sampling faster shows nothing new,
while a nanosecond period would schedule ~10^12 events in a 20-minute run and never finish."""
INTERVAL_WHY = f"a finite number of seconds in [{MIN_INTERVAL_S:g}, 10,000,000]"

MIN_LINK_GBPS = 0.1
"""Slowest KV-transfer link (100 Mb/s): below any datacenter NIC (1 GbE is the slowest
Ethernet still sold); a slower one turns a prompt's KV cache into hours of transfer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolConfig:
    """One pool of a disaggregated deployment: ``workers`` engines of ``tp`` GPUs each.

    ``engine`` is the pool's engine settings: the deployment's top-level ``engine`` with the
    pool's own ``engine`` fields laid over it (``DeploymentConfig.from_dict`` merges them).
    """

    tp: int = 1
    workers: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)
    ep: int = 1
    moe_tp: int | None = None
    attention_dp: int = 1

    def __post_init__(self) -> None:
        check_tp("tp", self.tp)
        integer("workers", self.workers, 1, 100_000)
        check_parallel(self.tp, self.ep, self.moe_tp, self.attention_dp)

    @property
    def gpus_per_worker(self) -> int:
        """GPUs of one engine replica: ``tp x attention_dp``."""
        return self.tp * self.attention_dp

    @property
    def moe_tp_size(self) -> int:
        """Tensor parallelism inside each expert (derived when ``moe_tp`` is unset)."""
        return moe_tp_size(self.tp, self.ep, self.moe_tp, self.attention_dp)

    @property
    def gpus(self) -> int:
        """GPUs the pool occupies."""
        return self.gpus_per_worker * self.workers


@dataclass(frozen=True, slots=True, kw_only=True)
class KVRouterConfig:
    """Knobs of the KV-aware router (Dynamo's cost function)."""

    overlap_weight: float = 1.0
    temperature: float = 0.0

    def __post_init__(self) -> None:
        number("kv_router.overlap_weight", self.overlap_weight, 0, 1_000_000)
        number("kv_router.temperature", self.temperature, 0, 1_000_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class KVTransferConfig:
    """The link a prompt's KV cache crosses from a prefill worker to a decode worker.

    ``gbps`` is the bandwidth of one GPU's link in gigabits per second; a TP group moves its
    shards over its ranks' links in parallel. ``None`` takes the default of ``link``:
    ``nvlink`` is the GPU's NVLink bandwidth (one direction, from the GPU catalog), ``rdma``
    400 Gb/s (:data:`dynosim.perf.hardware.RDMA_GBPS`), ``auto`` NVLink when both pools fit
    in one node (:data:`dynosim.perf.hardware.GPUS_PER_NODE` GPUs) and RDMA otherwise.
    """

    link: Link = "auto"
    gbps: float | None = None
    latency_us: float | None = None

    def __post_init__(self) -> None:
        choice("kv_transfer.link", self.link, get_args(Link))
        if self.gbps is not None:
            number("kv_transfer.gbps", self.gbps, MIN_LINK_GBPS, 10_000_000,
                   why="100 Mb/s or faster")  # fmt: skip
        if self.latency_us is not None:
            number("kv_transfer.latency_us", self.latency_us, 0, 1_000_000_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLimits:
    """Worker-count bounds the planner keeps one pool within."""

    min_workers: int = 1
    max_workers: int = 8

    def __post_init__(self) -> None:
        integer("min_workers", self.min_workers, 1, 100_000)
        integer("max_workers", self.max_workers, 1, 100_000)
        if self.max_workers < self.min_workers:
            raise ConfigError(
                "max_workers", self.max_workers, f">= min_workers ({self.min_workers})"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannerConfig:
    """Autoscaling of the worker pools, as Dynamo's planner does it.

    Every ``metric_pulling_interval_s`` the planner samples what a real planner sees (waiting
    requests, KV-cache usage, arrivals, first tokens); every ``adjustment_interval_s`` it
    decides each pool's worker count within ``min_workers``/``max_workers`` (``prefill`` and
    ``decode`` override them per pool in disagg mode) and ``max_gpus``; a pool with a worker
    still starting is left alone (Dynamo's planner blocks adjustment while it scales). A new
    worker takes
    traffic ``startup_s`` after the decision; a removed one drains (no new requests, it
    finishes what it holds, then frees its GPUs).

    Policies:
      * ``load``: Dynamo's load-based planner. Scale a pool up by one worker when, averaged
        over the interval, its KV usage exceeds ``kv_scale_up`` or its waiting requests per
        worker exceed ``queue_scale_up`` (a prefill pool looks at its queue only), down by one
        when both are below their ``*_scale_down``. Defaults are Dynamo's
        (``--decode-kv-scale-up-threshold 0.9``,
        ``--decode-kv-scale-down-threshold 0.5``, ``--prefill-queue-scale-up-threshold 0.5``,
        ``--prefill-queue-scale-down-threshold 0.2``, ``--metric-pulling-interval 1``,
        ``--adjustment-interval 30``: ai-dynamo/dynamo v0.3 ``docs/architecture/planner.md``).
        Dynamo watches only KV usage on decode/aggregated workers; this planner also scales
        them on their queue, since an engine capped by ``max_num_seqs`` queues at low KV use.
      * ``sla``: Dynamo's SLA planner. Predict the next interval's arrival rate and mean
        input/output lengths as those of the last (a constant predictor), and set each pool to
        the workers that carry them: prefill tokens/s per worker for prompts of that mean
        length (computed in ``max_num_batched_tokens`` chunks at their growing context), and
        decode tokens/s per worker at the largest batch
        whose step meets the deployment's ``slo.itl_ms`` (both from the step-time model, as
        Dynamo's pre-deployment profile gives them). As Dynamo does, the estimates are
        corrected by what the interval showed: the decode ITL target is divided by observed
        ITL / the model's ITL at the observed batch, and the prefill load is scaled by
        ``min(1, observed TTFT / the model's prefill time)`` (ai-dynamo/dynamo
        ``components/planner``, "correction factor").
    """

    policy: PlannerPolicy = "load"
    adjustment_interval_s: float = 30.0
    metric_pulling_interval_s: float = 1.0
    startup_s: float = 120.0
    min_workers: int = 1
    max_workers: int = 8
    max_gpus: int | None = None
    kv_scale_up: float = 0.9
    kv_scale_down: float = 0.5
    queue_scale_up: float = 0.5
    queue_scale_down: float = 0.2
    prefill: PoolLimits | None = None
    decode: PoolLimits | None = None

    def __post_init__(self) -> None:
        choice("planner.policy", self.policy, get_args(PlannerPolicy))
        for name in ("adjustment_interval_s", "metric_pulling_interval_s"):
            number(f"planner.{name}", getattr(self, name), MIN_INTERVAL_S, 10_000_000)
        number("planner.startup_s", self.startup_s, 0, 10_000_000)
        integer("planner.min_workers", self.min_workers, 1, 100_000)
        integer("planner.max_workers", self.max_workers, 1, 100_000)
        if self.max_workers < self.min_workers:
            raise ConfigError(
                "planner.max_workers", self.max_workers, f">= planner.min_workers "
                f"({self.min_workers})"
            )  # fmt: skip
        if self.max_gpus is not None:
            integer("planner.max_gpus", self.max_gpus, 1, 1_000_000)
        for name in ("kv_scale_up", "kv_scale_down", "queue_scale_up", "queue_scale_down"):
            number(f"planner.{name}", getattr(self, name), 0, 1_000_000)
        if self.kv_scale_down > self.kv_scale_up:
            raise ConfigError(
                "planner.kv_scale_down", self.kv_scale_down, f"<= planner.kv_scale_up "
                f"({self.kv_scale_up})"
            )  # fmt: skip
        if self.queue_scale_down > self.queue_scale_up:
            raise ConfigError(
                "planner.queue_scale_down", self.queue_scale_down, f"<= planner.queue_scale_up "
                f"({self.queue_scale_up})"
            )  # fmt: skip

    def limits(self, pool: str) -> PoolLimits:
        """The worker bounds of ``pool`` ("agg", "prefill" or "decode")."""
        own = self.prefill if pool == "prefill" else self.decode if pool == "decode" else None
        if own is not None:
            return own
        return PoolLimits(min_workers=self.min_workers, max_workers=self.max_workers)
