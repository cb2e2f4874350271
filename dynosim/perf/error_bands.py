"""Error-band arithmetic of a calibration profile's residual spread ``sigma``.

Log-normal error: a simulated value ``v`` with spread ``sigma``
(:meth:`dynosim.perf.calibration.CalibrationProfile.sigma`) has the band ``v * exp(-z sigma) ..
v * exp(z sigma)`` (``z = 1``: +-1 sigma); an SLO threshold ``T`` held with margin quantile
``q`` becomes ``T / exp(z_q sigma)`` (``z_q`` the standard normal quantile), so a configuration
that meets the tightened threshold in simulation still meets ``T`` when the simulator
under-predicts by its ``q``-quantile error.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from dynosim.errors import ConfigError

__all__ = ["band", "metric_error_kind", "parse_quantile", "tightened", "with_margin", "z_score"]


def z_score(quantile: float) -> float:
    """The standard normal quantile of ``quantile`` in (0, 1) (p90: 1.2816)."""
    if not 0.0 < quantile < 1.0:
        raise ConfigError("quantile", quantile, "a number in (0, 1)")
    return NormalDist().inv_cdf(quantile)


def band(value: float, sigma: float, z: float = 1.0) -> tuple[float, float]:
    """``value``'s error band ``(value * exp(-z sigma), value * exp(z sigma))``."""
    return (value * math.exp(-z * sigma), value * math.exp(z * sigma))


def tightened(threshold: float, sigma: float, quantile: float) -> float:
    """An upper-bound SLO threshold held with margin: ``threshold / exp(z_q sigma)``.

    A simulated value below it stays below ``threshold`` unless the simulator under-predicts
    by more than its ``quantile`` error (log-normal error of spread ``sigma``).
    """
    return threshold / math.exp(max(z_score(quantile), 0.0) * sigma)


def metric_error_kind(metric: str) -> str | None:
    """Which residual spread applies to a metric name (``ttft``, ``tpot`` or None: none)."""
    head = metric.partition(".")[0]
    if head in ("time_to_first_token", "ttft"):
        return "ttft"
    if head in ("inter_token_latency", "output_token_throughput_per_user", "tpot", "itl"):
        return "tpot"
    return None


def parse_quantile(raw: object, where: str) -> float:
    """``p90`` / ``90`` / ``0.9`` -> 0.9 (a quantile in [0.5, 1)).

    Raises:
        ConfigError: anything else.
    """
    text = str(raw).strip().lower()
    try:
        q = float(text[1:]) / 100 if text.startswith("p") else float(text)
    except ValueError:
        raise ConfigError(where, raw, "a quantile such as p90 (or 0.9)") from None
    if q >= 1.0 and not text.startswith("p"):
        q /= 100
    if isinstance(raw, bool) or not 0.5 <= q < 1.0:
        raise ConfigError(where, raw, "a quantile in [p50, p100), such as p90")
    return q


def with_margin(metric: str, op: str, value: float, sigma: float, quantile: float) -> float:
    """An SLO threshold on ``metric`` held with the ``quantile`` error margin.

    ``<=`` on a latency: ``value / exp(z_q sigma)``; ``>=`` on a rate (1/ITL):
    ``value * exp(z_q sigma)``; other constraints unchanged.
    """
    if sigma <= 0 or metric_error_kind(metric) is None:
        return value
    factor = math.exp(max(z_score(quantile), 0.0) * sigma)
    return value / factor if op == "<=" else value * factor
