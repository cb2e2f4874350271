"""Names, units and number formats of metrics and constraints, as a reader sees them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from search.study.objectives import Constraint

KEY_METRICS = (
    "output_token_throughput_per_gpu",
    "output_token_throughput_per_user.avg",
    "time_to_first_token.p90",
    "inter_token_latency.p90",
    "goodput",
    "prefix_cache_hit_rate",
    "cost_per_million_output_tokens",
)
"""Metrics shown beside the objectives in hover text."""
_NAMES: dict[str, tuple[str, str]] = {  # metric stem -> (short name, unit)
    "time_to_first_token": ("TTFT", "ms"),
    "inter_token_latency": ("ITL", "ms"),
    "request_latency": ("latency", "ms"),
    "output_token_throughput_per_user": ("speed/user", "tok/s/user"),
    "output_token_throughput_per_gpu": ("throughput/GPU", "tok/s/GPU"),
    "output_token_throughput": ("throughput", "tok/s"),
    "request_throughput": ("requests", "req/s"),
    "goodput": ("goodput", "req/s"),
    "prefix_cache_hit_rate": ("prefix hits", "%"),
    "gpu_hours": ("GPU hours", "GPU·h"),
    "cost_per_million_output_tokens": ("cost", "$/Mtok"),
    "simulated_duration_s": ("simulated", "s"),
    "wall_s": ("wall", "s"),
    "capacity_rps": ("capacity", "req/s"),
    "capacity_rps_per_gpu": ("capacity req/GPU", "req/s/GPU"),
    "capacity_output_tokens_per_s_per_gpu": ("capacity/GPU", "tok/s/GPU"),
    "load_level": ("load", ""),
    "gpus": ("GPUs", ""),
    "slo_attainment": ("SLO attainment", "%"),
    "utilization": ("utilization", "%"),
}
_FRACTIONS = frozenset({"prefix_cache_hit_rate", "slo_attainment", "utilization"})
"""Metrics stored as fractions in [0, 1] and shown as percent."""
_OPS = {"<=": "≤", ">=": "≥"}


def metric_label(metric: str, *, unit: bool = True) -> str:
    """Short name of a metric with its unit: ``time_to_first_token.p90`` -> ``TTFT p90 (ms)``."""
    stem, _, stat = metric.partition(".")
    short, u = _NAMES.get(stem, (stem, ""))
    text = f"{short} {stat}" if stat else short
    return f"{text} ({u})" if unit and u else text


def metric_unit(metric: str) -> str:
    """Unit of a metric (``ms``, ``tok/s/GPU``...), ``""`` when unknown."""
    return _NAMES.get(metric.partition(".")[0], ("", ""))[1]


def format_value(metric: str, value: float | None) -> str:
    """A metric value for a reader: thousands separators, fractions (hit rate...) as percent."""
    if value is None or not math.isfinite(value):
        return "-"
    if metric.partition(".")[0] in _FRACTIONS:
        return f"{100.0 * value:.1f}"
    mag = abs(value)
    if mag >= 100:
        return f"{value:,.0f}"
    if mag >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def constraint_label(c: Constraint) -> str:
    """``time_to_first_token.p90 <= 2000`` -> ``TTFT p90 ≤ 2000 ms``."""
    label = metric_label(c.metric, unit=False)
    return f"{label} {_OPS[c.op]} {c.value:g} {metric_unit(c.metric)}".rstrip()


def knobs_text(params: Mapping[str, Any]) -> str:
    """``tp=4 router=kv ...`` in key order."""
    return " ".join(f"{k}={short_value(v)}" for k, v in sorted(params.items()))


def short_value(v: Any) -> str:
    """A knob value as a cell shows it (floats to 4 significant digits)."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)
