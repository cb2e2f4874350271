"""Deployment configuration: one serving configuration of a cluster, frozen and validated.

``DeploymentConfig.from_dict`` is the edge: it rejects unknown fields and bad values with a
message naming the field, the value and what is allowed. The objects are never mutated; use
``dataclasses.replace`` to derive variants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from dynosim.errors import ConfigError

Backend = Literal["vllm", "sglang", "trtllm"]
Timing = Literal["aic", "roofline"]
RouterName = Literal["round_robin", "random", "least_loaded", "kv_aware", "kv_load"]
DType = Literal["bf16", "fp8"]
Mode = Literal["agg", "disagg"]
Link = Literal["auto", "nvlink", "rdma"]
PlannerPolicy = Literal["load", "sla"]
PoolName = Literal["agg", "prefill", "decode"]

BLOCK_SIZES = (16, 32, 64, 128, 256, 512)


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, value, " | ".join(allowed))


def _int(name: str, value: object, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "an integer")
    if value < low or (high is not None and value > high):
        raise ConfigError(name, value, f"an integer in [{low}, {high if high else 'inf'}]")


def _float(name: str, value: object, low: float, high: float, *, open_low: bool = False) -> None:
    bracket = "(" if open_low else "["
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, value, f"a number in {bracket}{low}, {high}]")
    # written so that NaN fails every comparison and is refused
    in_low = value > low if open_low else value >= low
    if not (in_low and value <= high):
        raise ConfigError(name, value, f"a finite number in {bracket}{low}, {high}]")


def _bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(name, value, "true | false")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    """Per-worker engine knobs, named as vLLM names them."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 64
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    gpu_memory_utilization: float = 0.9

    def __post_init__(self) -> None:
        _int("engine.max_num_seqs", self.max_num_seqs, 1, 65536)
        _int("engine.max_num_batched_tokens", self.max_num_batched_tokens, 1, 1 << 20)
        if self.block_size not in BLOCK_SIZES:
            raise ConfigError(
                "engine.block_size", self.block_size, " | ".join(map(str, BLOCK_SIZES))
            )
        _bool("engine.enable_prefix_caching", self.enable_prefix_caching)
        _bool("engine.enable_chunked_prefill", self.enable_chunked_prefill)
        _float(
            "engine.gpu_memory_utilization", self.gpu_memory_utilization, 0.0, 1.0, open_low=True
        )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                "engine.max_num_batched_tokens",
                self.max_num_batched_tokens,
                f">= engine.max_num_seqs ({self.max_num_seqs}), as vLLM requires",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class KVRouterConfig:
    """Knobs of the KV-aware router (Dynamo's cost function)."""

    overlap_weight: float = 1.0
    temperature: float = 0.0

    def __post_init__(self) -> None:
        _float("kv_router.overlap_weight", self.overlap_weight, 0.0, 1e6)
        _float("kv_router.temperature", self.temperature, 0.0, 1e6)


@dataclass(frozen=True, slots=True, kw_only=True)
class SLOConfig:
    """Service-level objectives a request must meet to count towards goodput (ms; None = none)."""

    ttft_ms: float | None = 2000.0
    itl_ms: float | None = 50.0
    e2e_ms: float | None = None

    def __post_init__(self) -> None:
        for f in ("ttft_ms", "itl_ms", "e2e_ms"):
            v = getattr(self, f)
            if v is not None:
                _float(f"slo.{f}", v, 0.0, 1e12, open_low=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolConfig:
    """One pool of a disaggregated deployment: ``workers`` engines of ``tp`` GPUs each.

    ``engine`` is the pool's engine settings: the deployment's top-level ``engine`` with the
    pool's own ``engine`` fields laid over it (``DeploymentConfig.from_dict`` merges them).
    """

    tp: int = 1
    workers: int = 1
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self) -> None:
        _tp("tp", self.tp)
        _int("workers", self.workers, 1, 100_000)

    @property
    def gpus(self) -> int:
        """GPUs the pool occupies."""
        return self.tp * self.workers


NVLINK_LATENCY_US = 10.0
"""Assumed per-transfer latency on NVLink inside a node (NIXL/UCX setup and completion
notice; an estimate, not a measurement: the wire latency itself is ~1 us)."""
RDMA_GBPS = 400.0
"""InfiniBand NDR / RoCE per GPU: one 400 Gb/s ConnectX-7 NIC per GPU on DGX/HGX H100,
H200 and B200 nodes (NVIDIA DGX H100/H200 user guide, "network ports")."""
RDMA_LATENCY_US = 50.0
"""Assumed per-transfer latency across nodes over RDMA (NIXL/UCX rendezvous, completion
notice and the extra hop through the NIC; an estimate)."""
GPUS_PER_NODE = 8
"""GPUs in one HGX/DGX node (AIConfigurator's ``systems/*.yaml``: ``num_gpus_per_node: 8``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KVTransferConfig:
    """The link a prompt's KV cache crosses from a prefill worker to a decode worker.

    ``gbps`` is the bandwidth of one GPU's link in gigabits per second; a TP group moves its
    shards over its ranks' links in parallel. ``None`` takes the default of ``link``:
    ``nvlink`` is the GPU's NVLink bandwidth (one direction, from the GPU catalog), ``rdma``
    400 Gb/s (:data:`RDMA_GBPS`), ``auto`` NVLink when both pools fit in one node
    (:data:`GPUS_PER_NODE` GPUs) and RDMA otherwise.
    """

    link: Link = "auto"
    gbps: float | None = None
    latency_us: float | None = None

    def __post_init__(self) -> None:
        _choice("kv_transfer.link", self.link, get_args(Link))
        if self.gbps is not None:
            _float("kv_transfer.gbps", self.gbps, 0.0, 1e7, open_low=True)
        if self.latency_us is not None:
            _float("kv_transfer.latency_us", self.latency_us, 0.0, 1e9)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLimits:
    """Worker-count bounds the planner keeps one pool within."""

    min_workers: int = 1
    max_workers: int = 8

    def __post_init__(self) -> None:
        _int("min_workers", self.min_workers, 1, 100_000)
        _int("max_workers", self.max_workers, 1, 100_000)
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
        _choice("planner.policy", self.policy, get_args(PlannerPolicy))
        _float("planner.adjustment_interval_s", self.adjustment_interval_s, 0.0, 1e7, open_low=True)
        _float(
            "planner.metric_pulling_interval_s",
            self.metric_pulling_interval_s,
            0.0,
            1e7,
            open_low=True,
        )
        _float("planner.startup_s", self.startup_s, 0.0, 1e7)
        _int("planner.min_workers", self.min_workers, 1, 100_000)
        _int("planner.max_workers", self.max_workers, 1, 100_000)
        if self.max_workers < self.min_workers:
            raise ConfigError(
                "planner.max_workers", self.max_workers, f">= planner.min_workers "
                f"({self.min_workers})"
            )  # fmt: skip
        if self.max_gpus is not None:
            _int("planner.max_gpus", self.max_gpus, 1, 1_000_000)
        for name in ("kv_scale_up", "kv_scale_down", "queue_scale_up", "queue_scale_down"):
            _float(f"planner.{name}", getattr(self, name), 0.0, 1e6)
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


def _tp(name: str, value: object) -> None:
    _int(name, value, 1, 64)
    assert isinstance(value, int)
    if value & (value - 1):
        raise ConfigError(name, value, "a power of two (1, 2, 4, 8, ...)")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentConfig:
    """One serving deployment.

    ``mode: agg`` (the default): ``workers`` identical engines of ``tp`` GPUs each, every one
    prefilling and decoding. ``mode: disagg``: a ``prefill`` pool and a ``decode`` pool (each
    with its own ``tp``, ``workers`` and ``engine``); a request is routed by ``router`` to a
    prefill worker, its KV cache crosses ``kv_transfer`` to a decode worker picked by
    ``decode_router``. A prompt whose uncached part on that decode worker is at most
    ``max_local_prefill_tokens`` is prefilled there instead (0: always remotely). ``planner``
    scales the pools (absent: fixed).
    """

    model: str
    gpu: str
    backend: Backend = "vllm"
    timing: Timing = "aic"
    dtype: DType = "bf16"
    mode: Mode = "agg"
    tp: int = 1
    workers: int = 1
    prefill: PoolConfig | None = None
    decode: PoolConfig | None = None
    router: RouterName = "round_robin"
    decode_router: RouterName = "least_loaded"
    kv_router: KVRouterConfig = field(default_factory=KVRouterConfig)
    kv_transfer: KVTransferConfig = field(default_factory=KVTransferConfig)
    max_local_prefill_tokens: int = 0
    planner: PlannerConfig | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    slo: SLOConfig = field(default_factory=SLOConfig)
    gpu_hour_usd: float | None = None
    framework_overhead_us: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError("model", self.model, "a model name from the catalog")
        if not isinstance(self.gpu, str) or not self.gpu:
            raise ConfigError("gpu", self.gpu, "a GPU name from the catalog")
        _choice("backend", self.backend, get_args(Backend))
        _choice("timing", self.timing, get_args(Timing))
        _choice("dtype", self.dtype, get_args(DType))
        _choice("mode", self.mode, get_args(Mode))
        _choice("router", self.router, get_args(RouterName))
        _choice("decode_router", self.decode_router, get_args(RouterName))
        _tp("tp", self.tp)
        _int("workers", self.workers, 1, 100_000)
        _int("max_local_prefill_tokens", self.max_local_prefill_tokens, 0, 1 << 30)
        if self.mode == "disagg":
            for name in ("prefill", "decode"):
                if not isinstance(getattr(self, name), PoolConfig):
                    raise ConfigError(
                        name, getattr(self, name), "a pool {tp, workers, engine} (mode: disagg)"
                    )
        else:
            for name in ("prefill", "decode"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, "a pool", "no pools with mode: agg (set mode: disagg)")
            if self.max_local_prefill_tokens:
                raise ConfigError(
                    "max_local_prefill_tokens", self.max_local_prefill_tokens, "0 with mode: agg"
                )
        if self.planner is not None:
            self._check_planner(self.planner)
        if self.gpu_hour_usd is not None:
            _float("gpu_hour_usd", self.gpu_hour_usd, 0.0, 1e6)
        if self.framework_overhead_us is not None:
            _float("framework_overhead_us", self.framework_overhead_us, 0.0, 1e7)

    def _check_planner(self, planner: PlannerConfig) -> None:
        for name, pool in self.pools():
            lim = planner.limits(name)
            where = "planner" if name == "agg" or getattr(planner, name) is None else (
                f"planner.{name}"
            )  # fmt: skip
            if not lim.min_workers <= pool.workers <= lim.max_workers:
                field_name = "workers" if name == "agg" else f"{name}.workers"
                raise ConfigError(
                    field_name, pool.workers, f"within {where}.min_workers..max_workers "
                    f"({lim.min_workers}..{lim.max_workers})"
                )  # fmt: skip
        if planner.max_gpus is not None and self.gpus > planner.max_gpus:
            raise ConfigError(
                "planner.max_gpus", planner.max_gpus, f">= the initial GPUs ({self.gpus})"
            )
        if self.mode == "agg":
            for name in ("prefill", "decode"):
                if getattr(planner, name) is not None:
                    raise ConfigError(
                        f"planner.{name}", "limits", "pool limits only with mode: disagg"
                    )

    def pools(self) -> tuple[tuple[PoolName, PoolConfig], ...]:
        """The worker pools: ``(("agg", ...),)`` or ``(("prefill", ...), ("decode", ...))``."""
        if self.mode == "disagg":
            assert self.prefill is not None
            assert self.decode is not None
            return (("prefill", self.prefill), ("decode", self.decode))
        return (("agg", PoolConfig(tp=self.tp, workers=self.workers, engine=self.engine)),)

    def pool_view(self, name: PoolName) -> DeploymentConfig:
        """The aggregated deployment of one pool's workers (for sizing and step times)."""
        pool = dict(self.pools())[name]
        return DeploymentConfig(
            model=self.model,
            gpu=self.gpu,
            backend=self.backend,
            timing=self.timing,
            dtype=self.dtype,
            tp=pool.tp,
            workers=pool.workers,
            engine=pool.engine,
            slo=self.slo,
            gpu_hour_usd=self.gpu_hour_usd,
            framework_overhead_us=self.framework_overhead_us,
        )

    @property
    def gpus(self) -> int:
        """GPUs the deployment starts with (both pools in disagg mode)."""
        return sum(pool.gpus for _, pool in self.pools())

    @property
    def peak_gpus(self) -> int:
        """The most GPUs the deployment can hold: its planner's ceiling, or :attr:`gpus`."""
        p = self.planner
        if p is None:
            return self.gpus
        most = sum(pool.tp * p.limits(name).max_workers for name, pool in self.pools())
        return min(most, p.max_gpus) if p.max_gpus is not None else most

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeploymentConfig:
        """Build from parsed YAML/JSON, rejecting unknown fields and bad values.

        In disagg mode a pool's ``engine`` fields are laid over the top-level ``engine``, and
        a top-level ``tp`` or ``workers`` is an error (each pool has its own).
        """
        _check_keys(data, {f.name for f in fields(cls)})
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("prefill", "decode", "planner"):
                continue
            sub = _NESTED.get(key)
            kwargs[key] = value if sub is None else _section(key, value, sub)
        mode = data.get("mode", "agg")
        if mode == "disagg":
            for key in ("tp", "workers"):
                if key in data:
                    raise ConfigError(
                        key, data[key], f"no top-level {key} with mode: disagg (set "
                        f"prefill.{key} and decode.{key})"
                    )  # fmt: skip
        engine = _mapping("engine", data.get("engine", {}))
        for key in ("prefill", "decode"):
            if key in data:
                kwargs[key] = _pool(key, data[key], engine)
        if "planner" in data:
            kwargs["planner"] = _planner(data["planner"])
        for required in ("model", "gpu"):
            if required not in kwargs:
                raise ConfigError(required, None, "a value (this field is required)")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form; ``from_dict(to_dict())`` gives an equal config.

        Fields left at ``None`` that only exist in one mode (pools, planner) are left out.
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None and f.name in ("prefill", "decode", "planner"):
                continue
            if self.mode == "disagg" and f.name in ("tp", "workers"):
                continue
            out[f.name] = _plain(v)
        return out


def _check_keys(data: object, top: set[str]) -> None:
    if not isinstance(data, Mapping):
        raise ConfigError("deployment", data, "a mapping of fields")
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(str(key), value, "a field name (a string)")
        if key not in top:
            raise ConfigError(key, value, "one of " + ", ".join(sorted(top)))


def _plain(v: object) -> Any:
    if _is_dc(v):
        return {g.name: _plain(getattr(v, g.name)) for g in fields(v)}  # type: ignore[arg-type]
    return v


_NESTED: dict[str, type] = {
    "kv_router": KVRouterConfig,
    "engine": EngineConfig,
    "slo": SLOConfig,
    "kv_transfer": KVTransferConfig,
}


def _mapping(key: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "a mapping of fields")
    return value


def _section(key: str, value: object, sub: type) -> Any:
    names = _names(sub)
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "a mapping of " + ", ".join(names))
    for k in value:
        if k not in names:
            raise ConfigError(f"{key}.{k}", value[k], "one of " + ", ".join(names))
    try:
        return sub(**value)
    except ConfigError as exc:
        raise _prefixed(exc, key, sub) from None


def _prefixed(exc: ConfigError, key: str, sub: type) -> ConfigError:
    """``exc`` with its field named under ``key`` (``engine.x`` in a pool: ``decode.engine.x``)."""
    own = {"EngineConfig": "engine", "KVRouterConfig": "kv_router", "SLOConfig": "slo",
           "KVTransferConfig": "kv_transfer", "PlannerConfig": "planner"}  # fmt: skip
    field_name = exc.field
    head = own.get(sub.__name__)
    if head is not None and field_name.startswith(head + "."):
        field_name = field_name[len(head) + 1 :]
    if key == field_name.split(".")[0]:
        return exc
    return ConfigError(f"{key}.{field_name}", exc.value, exc.allowed)


def _pool(key: str, value: object, engine: Mapping[str, Any]) -> PoolConfig:
    value = _mapping(key, value)
    names = _names(PoolConfig)
    for k in value:
        if k not in names:
            raise ConfigError(f"{key}.{k}", value[k], "one of " + ", ".join(names))
    kwargs = dict(value)
    own = _mapping(f"{key}.engine", value.get("engine", {}))
    kwargs["engine"] = _section(f"{key}.engine", {**engine, **own}, EngineConfig)
    try:
        return PoolConfig(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.field}", exc.value, exc.allowed) from None


def _planner(value: object) -> PlannerConfig:
    value = _mapping("planner", value)
    names = _names(PlannerConfig)
    kwargs: dict[str, Any] = {}
    for k, v in value.items():
        if k not in names:
            raise ConfigError(f"planner.{k}", v, "one of " + ", ".join(names))
        pool = k in ("prefill", "decode") and v is not None
        kwargs[k] = _section(f"planner.{k}", v, PoolLimits) if pool else v
    try:
        return PlannerConfig(**kwargs)
    except ConfigError as exc:
        raise _prefixed(exc, "planner", PlannerConfig) from None


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _is_dc(v: object) -> bool:
    return hasattr(v, "__dataclass_fields__")
