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
RouterName = Literal["round_robin", "random", "least_loaded", "kv_aware"]
DType = Literal["bf16", "fp8"]

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
class DeploymentConfig:
    """One aggregated serving deployment: ``workers`` identical engines of ``tp`` GPUs each."""

    model: str
    gpu: str
    backend: Backend = "vllm"
    timing: Timing = "aic"
    dtype: DType = "bf16"
    tp: int = 1
    workers: int = 1
    router: RouterName = "round_robin"
    kv_router: KVRouterConfig = field(default_factory=KVRouterConfig)
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
        _choice("router", self.router, get_args(RouterName))
        _int("tp", self.tp, 1, 64)
        if self.tp & (self.tp - 1):
            raise ConfigError("tp", self.tp, "a power of two (1, 2, 4, 8, ...)")
        _int("workers", self.workers, 1, 100_000)
        if self.gpu_hour_usd is not None:
            _float("gpu_hour_usd", self.gpu_hour_usd, 0.0, 1e6)
        if self.framework_overhead_us is not None:
            _float("framework_overhead_us", self.framework_overhead_us, 0.0, 1e7)

    @property
    def gpus(self) -> int:
        """GPUs the deployment occupies."""
        return self.tp * self.workers

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeploymentConfig:
        """Build from parsed YAML/JSON, rejecting unknown fields and bad values."""
        if not isinstance(data, Mapping):
            raise ConfigError("deployment", data, "a mapping of fields")
        for key in data:
            if not isinstance(key, str):
                raise ConfigError(str(key), data[key], "a field name (a string)")
        nested = {"kv_router": KVRouterConfig, "engine": EngineConfig, "slo": SLOConfig}
        kwargs: dict[str, Any] = {}
        top = {f.name for f in fields(cls)}
        for key, value in data.items():
            if key not in top:
                raise ConfigError(str(key), value, "one of " + ", ".join(sorted(top)))
            sub = nested.get(key)
            if sub is None:
                kwargs[key] = value
                continue
            if not isinstance(value, Mapping):
                raise ConfigError(key, value, "a mapping of " + ", ".join(_names(sub)))
            for k in value:
                if k not in _names(sub):
                    raise ConfigError(f"{key}.{k}", value[k], "one of " + ", ".join(_names(sub)))
            kwargs[key] = sub(**value)
        for required in ("model", "gpu"):
            if required not in kwargs:
                raise ConfigError(required, None, "a value (this field is required)")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form; ``from_dict(to_dict())`` gives an equal config."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = {g.name: getattr(v, g.name) for g in fields(v)} if _is_dc(v) else v
        return out


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _is_dc(v: object) -> bool:
    return hasattr(v, "__dataclass_fields__")
