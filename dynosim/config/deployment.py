"""Deployment configuration: one serving configuration of a cluster, frozen and validated.

``DeploymentConfig.from_dict`` is the edge: it rejects unknown fields and bad values with a
message naming the field, the value and what is allowed. The objects are never mutated; use
``dataclasses.replace`` to derive variants. The sections live beside: ``engine``, ``cluster``
(pools, routing, KV transfer, planner), ``host`` and ``speculative``; ``serde`` reads and
writes plain data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

from dynosim.checks import choice, integer, number
from dynosim.config.cluster import (
    KVRouterConfig,
    KVTransferConfig,
    PlannerConfig,
    PoolConfig,
    PoolName,
    RouterName,
    check_parallel,
    check_tp,
    moe_tp_size,
)
from dynosim.config.engine import Backend, EngineConfig, check_backend_engine
from dynosim.config.host import HostConfig, check_host
from dynosim.config.serde import (
    LEFT_OUT_AT_DEFAULT,
    check_keys,
    mapping_of_fields,
    plain,
    read_planner,
    read_pool,
    read_section,
)
from dynosim.config.speculative import SpeculativeConfig
from dynosim.errors import ConfigError

Timing = Literal["aic", "roofline"]
AicDatabaseMode = Literal["hybrid", "silicon"]
DType = Literal["bf16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4_wo"]
KVDType = Literal["bf16", "fp8"]
MoEActivation = Literal["bf16", "mxfp8"]
"""Activation precision of MXFP4 experts (``moe_activation``)."""
Fp8Scales = Literal["dynamic", "static"]
"""How FP8 GEMMs scale their activations (``fp8_scales``): per step from the tensor's amax, or
with the fixed scales the checkpoint ships (:data:`dynosim.perf.catalog.STATIC_FP8_CHECKPOINTS`)."""
Mode = Literal["agg", "disagg"]

PER_POOL_FIELDS = ("tp", "workers", "ep", "moe_tp", "attention_dp")
"""The fields each pool has of its own (beside its ``engine``): top-level only with
``mode: agg``."""


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
                number(f"slo.{f}", v, 0, 10**12, open_low=True)


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
    calibration: str | None = None
    ep: int = 1
    moe_tp: int | None = None
    attention_dp: int = 1
    kv_cache_dtype: KVDType | None = None
    moe_activation: MoEActivation | None = None
    fp8_scales: Fp8Scales | None = None
    host: HostConfig | None = None
    speculative: SpeculativeConfig | None = None
    aic_database_mode: AicDatabaseMode = "hybrid"

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError("model", self.model, "a model name from the catalog")
        if not isinstance(self.gpu, str) or not self.gpu:
            raise ConfigError("gpu", self.gpu, "a GPU name from the catalog")
        choice("backend", self.backend, get_args(Backend))
        choice("timing", self.timing, get_args(Timing))
        choice("aic_database_mode", self.aic_database_mode, get_args(AicDatabaseMode))
        choice("dtype", self.dtype, get_args(DType))
        choice("mode", self.mode, get_args(Mode))
        choice("router", self.router, get_args(RouterName))
        choice("decode_router", self.decode_router, get_args(RouterName))
        check_tp("tp", self.tp)
        integer("workers", self.workers, 1, 100_000)
        self._check_element_types()
        integer("max_local_prefill_tokens", self.max_local_prefill_tokens, 0, 1 << 30)
        if self.mode == "disagg":
            for name in ("prefill", "decode"):
                if not isinstance(getattr(self, name), PoolConfig):
                    raise ConfigError(
                        name, getattr(self, name), "a pool {tp, workers, engine} (mode: disagg)"
                    )
        else:
            check_parallel(self.tp, self.ep, self.moe_tp, self.attention_dp)
            for name in ("prefill", "decode"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, "a pool", "no pools with mode: agg (set mode: disagg)")
            if self.max_local_prefill_tokens:
                raise ConfigError(
                    "max_local_prefill_tokens", self.max_local_prefill_tokens, "0 with mode: agg"
                )
        self._check_engines()
        if self.planner is not None:
            self._check_planner(self.planner)
            if any(p.attention_dp > 1 for _, p in self.pools()):
                raise ConfigError(
                    "planner", "a planner", "no planner with attention_dp > 1 (not supported yet)"
                )
        if self.gpu_hour_usd is not None:
            number("gpu_hour_usd", self.gpu_hour_usd, 0, 1_000_000)
        if self.framework_overhead_us is not None:
            number("framework_overhead_us", self.framework_overhead_us, 0, 10_000_000)
        if self.calibration is not None and (
            not isinstance(self.calibration, str) or not self.calibration.strip()
        ):
            raise ConfigError("calibration", self.calibration, "the path of a profile YAML file")
        check_host(self.backend, self.host)

    def _check_element_types(self) -> None:
        """The KV cache's, (MXFP4 experts only) the MoE activations' element types, FP8 scales."""
        if self.kv_cache_dtype is not None:
            choice("kv_cache_dtype", self.kv_cache_dtype, get_args(KVDType))
        if self.moe_activation is not None:
            choice("moe_activation", self.moe_activation, get_args(MoEActivation))
            if self.dtype != "mxfp4":
                raise ConfigError(
                    "moe_activation", self.moe_activation, "unset unless dtype: mxfp4 (experts)"
                )
        if self.fp8_scales is not None:
            choice("fp8_scales", self.fp8_scales, get_args(Fp8Scales))
            if self.dtype != "fp8":
                raise ConfigError(
                    "fp8_scales", self.fp8_scales, "unset unless dtype: fp8 (per-tensor FP8)"
                )

    def _check_engines(self) -> None:
        """Backend-specific engine fields only with their backend (pool engines too)."""
        check_backend_engine(self.backend, "", self.engine)
        for name, pool in self._own_pools():
            check_backend_engine(self.backend, f"{name}.", pool.engine)

    def _own_pools(self) -> tuple[tuple[str, PoolConfig], ...]:
        return tuple((n, p) for n in ("prefill", "decode") if (p := getattr(self, n)) is not None)

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
        agg = PoolConfig(
            tp=self.tp,
            workers=self.workers,
            engine=self.engine,
            ep=self.ep,
            moe_tp=self.moe_tp,
            attention_dp=self.attention_dp,
        )
        return (("agg", agg),)

    def pool_view(self, name: PoolName) -> DeploymentConfig:
        """The aggregated deployment of one pool's workers (for sizing and step times).

        The pool's own fields (:data:`PER_POOL_FIELDS` and ``engine``) replace the top-level
        ones, the fields of the whole deployment (routing, KV transfer, planner, host) are at
        their defaults, and a prefill pool does not speculate; every other field is kept.
        """
        pool = dict(self.pools())[name]
        return replace(
            self,
            **_defaults(DeploymentConfig, _DEPLOYMENT_WIDE),
            **{key: getattr(pool, key) for key in PER_POOL_FIELDS},
            engine=pool.engine,
            speculative=self.speculative if name != "prefill" else None,
        )

    @property
    def kv_dtype(self) -> KVDType:
        """The KV cache's element type.

        ``kv_cache_dtype`` if set; else fp8 for fp8, fp8_block and nvfp4 weights (as before:
        an fp8 deployment stores its KV cache in fp8), else (bf16, mxfp4, int4_wo) bf16.
        """
        if self.kv_cache_dtype is not None:
            return self.kv_cache_dtype
        return "bf16" if self.dtype in ("bf16", "mxfp4", "int4_wo") else "fp8"

    @property
    def moe_tp_size(self) -> int:
        """Tensor parallelism inside each expert (``moe_tp``, or ``tp x attention_dp / ep``)."""
        return moe_tp_size(self.tp, self.ep, self.moe_tp, self.attention_dp)

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
        most = sum(pool.gpus_per_worker * p.limits(name).max_workers for name, pool in self.pools())
        return min(most, p.max_gpus) if p.max_gpus is not None else most

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeploymentConfig:
        """Build from parsed YAML/JSON, rejecting unknown fields and bad values.

        In disagg mode a pool's ``engine`` fields are laid over the top-level ``engine``, and
        a top-level ``tp`` or ``workers`` is an error (each pool has its own).
        """
        check_keys(data, {f.name for f in fields(cls)})
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("prefill", "decode", "planner"):
                continue
            sub = SECTIONS.get(key)
            kwargs[key] = value if sub is None else read_section(key, value, sub)
        mode = data.get("mode", "agg")
        if mode == "disagg":
            for key in PER_POOL_FIELDS:
                if key in data:
                    raise ConfigError(
                        key, data[key], f"no top-level {key} with mode: disagg (set "
                        f"prefill.{key} and decode.{key})"
                    )  # fmt: skip
        engine = mapping_of_fields("engine", data.get("engine", {}))
        for key in ("prefill", "decode"):
            if key in data:
                kwargs[key] = read_pool(key, data[key], engine)
        if "planner" in data:
            kwargs["planner"] = read_planner(data["planner"])
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
            if v is None and f.name in ("prefill", "decode", "planner", "speculative"):
                continue
            if self.mode == "disagg" and f.name in PER_POOL_FIELDS:
                continue
            if f.name in LEFT_OUT_AT_DEFAULT and v == LEFT_OUT_AT_DEFAULT[f.name]:
                continue  # left out at their defaults: older configs keep their plain form
            out[f.name] = plain(v)
        return out


SECTIONS: dict[str, type] = {
    "kv_router": KVRouterConfig,
    "engine": EngineConfig,
    "slo": SLOConfig,
    "kv_transfer": KVTransferConfig,
    "host": HostConfig,
    "speculative": SpeculativeConfig,
}
"""The nested sections ``from_dict`` reads with :func:`read_section` (the pools and the
planner have their own readers)."""
_DEPLOYMENT_WIDE = (
    "mode", "prefill", "decode", "router", "decode_router", "kv_router", "kv_transfer",
    "max_local_prefill_tokens", "planner", "host",
)  # fmt: skip
"""Fields of the whole deployment, at their defaults in a :meth:`DeploymentConfig.pool_view`."""


def _defaults(cls: type, names: tuple[str, ...]) -> dict[str, Any]:
    """The default of each named field of the dataclass ``cls`` (a fresh one for a factory)."""
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in names:
            factory = f.default_factory
            out[f.name] = factory() if callable(factory) else f.default
    return out
