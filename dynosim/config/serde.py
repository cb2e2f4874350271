"""Configs to and from plain data (parsed YAML/JSON): the machinery behind ``from_dict``.

``DeploymentConfig.from_dict`` reads each nested section with :func:`read_section` (its table
of sections is ``dynosim.config.deployment.SECTIONS``), the disaggregated pools with
:func:`read_pool` and the planner with :func:`read_planner`; ``to_dict`` writes with
:func:`plain`. A section's class names its fields ``SECTION.FIELD`` (``engine.block_size``);
read under a longer path, the error names the whole path (``decode.engine.block_size``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from dynosim.config.cluster import PlannerConfig, PoolConfig, PoolLimits
from dynosim.config.engine import EngineConfig
from dynosim.errors import ConfigError

LEFT_OUT_AT_DEFAULT: dict[str, object] = {
    "ep": 1,
    "moe_tp": None,
    "attention_dp": 1,
    "kv_cache_dtype": None,
    "moe_activation": None,
    "fp8_scales": None,
    "host": None,
}
"""Fields newer than the first configs, left out of ``to_dict`` at these defaults (in a
deployment and in each pool) so that older configs keep their plain form."""


def check_keys(data: object, top: set[str]) -> None:
    """``data`` is a mapping whose every key is one of ``top`` (the deployment's fields)."""
    if not isinstance(data, Mapping):
        raise ConfigError("deployment", data, "a mapping of fields")
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(str(key), value, "a field name (a string)")
        if key not in top:
            raise ConfigError(key, value, "one of " + ", ".join(sorted(top)))


def mapping_of_fields(key: str, value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping (of a section's fields)."""
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "a mapping of fields")
    return value


def read_section(key: str, value: object, sub: type) -> Any:
    """``sub(**value)``, its unknown fields and bad values named under ``key``."""
    names = field_names(sub)
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, "a mapping of " + ", ".join(names))
    for k in value:
        if k not in names:
            raise ConfigError(f"{key}.{k}", value[k], "one of " + ", ".join(names))
    try:
        return sub(**value)
    except ConfigError as exc:
        raise prefixed(exc, key) from None


def prefixed(exc: ConfigError, key: str) -> ConfigError:
    """``exc`` with its field named under ``key`` (``engine.x`` in a pool: ``decode.engine.x``).

    A section names its own fields after itself (``engine.x``); that head, the last part of
    ``key``, is replaced by the whole ``key``.
    """
    head = key.rsplit(".", 1)[-1]
    field_name = exc.field
    if field_name.startswith(head + "."):
        field_name = field_name[len(head) + 1 :]
    if key == field_name.split(".")[0]:
        return exc
    return ConfigError(f"{key}.{field_name}", exc.value, exc.allowed)


def read_pool(key: str, value: object, engine: Mapping[str, Any]) -> PoolConfig:
    """The ``prefill`` or ``decode`` pool, its ``engine`` laid over the top-level ``engine``."""
    value = mapping_of_fields(key, value)
    names = field_names(PoolConfig)
    for k in value:
        if k not in names:
            raise ConfigError(f"{key}.{k}", value[k], "one of " + ", ".join(names))
    kwargs = dict(value)
    own = mapping_of_fields(f"{key}.engine", value.get("engine", {}))
    kwargs["engine"] = read_section(f"{key}.engine", {**engine, **own}, EngineConfig)
    try:
        return PoolConfig(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc.field}", exc.value, exc.allowed) from None


def read_planner(value: object) -> PlannerConfig:
    """The ``planner`` section, with its per-pool ``prefill``/``decode`` limits."""
    value = mapping_of_fields("planner", value)
    names = field_names(PlannerConfig)
    kwargs: dict[str, Any] = {}
    for k, v in value.items():
        if k not in names:
            raise ConfigError(f"planner.{k}", v, "one of " + ", ".join(names))
        pool = k in ("prefill", "decode") and v is not None
        kwargs[k] = read_section(f"planner.{k}", v, PoolLimits) if pool else v
    try:
        return PlannerConfig(**kwargs)
    except ConfigError as exc:
        raise prefixed(exc, "planner") from None


def plain(v: object) -> Any:
    """``v`` as plain data: a config as a dict (a pool without its default parallelism)."""
    if _is_dc(v):
        out = {g.name: plain(getattr(v, g.name)) for g in fields(v)}  # type: ignore[arg-type]
        if isinstance(v, PoolConfig):
            for name in ("ep", "moe_tp", "attention_dp"):
                if out[name] == LEFT_OUT_AT_DEFAULT[name]:
                    del out[name]
        return out
    if isinstance(v, tuple):
        return list(v)  # YAML and JSON both write lists
    return v


def field_names(cls: type) -> list[str]:
    """The fields of the dataclass ``cls``, in order."""
    return [f.name for f in fields(cls)]


def _is_dc(v: object) -> bool:
    return hasattr(v, "__dataclass_fields__")
