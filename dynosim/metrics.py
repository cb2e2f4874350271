"""Per-request records in, serving metrics out (AIPerf names, latencies in ms). Pure numpy."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from dynosim.config import SLOConfig

STAT_KEYS = ("avg", "min", "max", "p50", "p90", "p99")
LATENCY_METRICS = ("time_to_first_token", "inter_token_latency", "request_latency")


@dataclass(frozen=True, slots=True)
class Stat:
    """Summary of one per-request quantity."""

    avg: float
    min: float
    max: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: npt.NDArray[np.float64]) -> Stat:
        """Summarise ``values``; an empty array gives NaN everywhere."""
        if values.size == 0:
            nan = float("nan")
            return cls(nan, nan, nan, nan, nan, nan)
        p50, p90, p99 = np.percentile(values, [50.0, 90.0, 99.0])
        return cls(
            avg=float(values.mean()),
            min=float(values.min()),
            max=float(values.max()),
            p50=float(p50),
            p90=float(p90),
            p99=float(p99),
        )


@dataclass(frozen=True, slots=True)
class RequestRecords:
    """Column arrays of what happened to each request, in integer microseconds.

    Rows are requests in workload order. ``first_token_us`` and ``finish_us`` are -1 for a
    rejected request.
    """

    arrival_us: npt.NDArray[np.int64]
    first_token_us: npt.NDArray[np.int64]
    finish_us: npt.NDArray[np.int64]
    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    cached_tokens: npt.NDArray[np.int64]
    worker: npt.NDArray[np.int64]
    preemptions: npt.NDArray[np.int64]

    @property
    def completed(self) -> npt.NDArray[np.bool_]:
        """Mask of requests that completed."""
        return self.finish_us >= 0

    def equal(self, other: RequestRecords) -> bool:
        """True when every column is identical."""
        return all(
            np.array_equal(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Metrics:
    """What one simulation measured. Latencies in ms, throughputs per second."""

    time_to_first_token: Stat
    inter_token_latency: Stat
    request_latency: Stat
    output_token_throughput_per_user: Stat
    request_throughput: float
    output_token_throughput: float
    output_token_throughput_per_gpu: float
    goodput: float
    slo_attainment: float
    prefix_cache_hit_rate: float
    gpu_hours: float
    cost_per_million_output_tokens: float
    completed_requests: int
    rejected_requests: int
    preemptions: int
    gpus: float
    utilization: float
    simulated_requests: int
    simulated_duration_s: float
    wall_s: float
    early_stop: str | None = None

    @property
    def speedup(self) -> float:
        """Simulated time over wall time."""
        return self.simulated_duration_s / self.wall_s if self.wall_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """Nested plain data keyed by metric name (JSON-ready; NaN stays NaN)."""
        out = asdict(self)
        out["speedup"] = self.speedup
        return out

    def flat(self) -> dict[str, float]:
        """One level: ``time_to_first_token.p90``, ``goodput``, ... (as objectives name them)."""
        out: dict[str, float] = {}
        for key, value in self.to_dict().items():
            if isinstance(value, dict):
                out.update({f"{key}.{k}": float(v) for k, v in value.items()})
            elif isinstance(value, int | float):
                out[key] = float(value)
        return out

    def deterministic_dict(self) -> dict[str, Any]:
        """``to_dict`` without the wall-clock fields, for bit-identity checks."""
        out = self.to_dict()
        del out["wall_s"], out["speedup"]
        return out


def summarize(
    records: RequestRecords,
    *,
    slo: SLOConfig,
    gpus: float,
    gpu_hour_usd: float,
    warmup_requests: int,
    wall_s: float,
    utilization: float = float("nan"),
    early_stop: str | None = None,
    rejected_requests: int | None = None,
) -> Metrics:
    """Turn per-request records into metrics.

    The first ``warmup_requests`` requests to complete are left out of every figure. The
    benchmark window runs from the earliest arrival among the measured requests to the last
    completion; throughputs and the cost per output token are over that window, GPU hours over
    the whole simulation (from time 0). ``slo_attainment`` is the fraction of the measured and
    the rejected requests that completed within every SLO (DistServe's attainment; a rejected
    request never meets its SLO). ``utilization`` (busy worker time over provisioned worker
    time), ``early_stop`` (why the run was stopped before the end) and, for a stopped run, the
    count of rejected requests (the unfinished ones are not rejected) come from the caller.
    """
    done = records.completed
    rejected = int((~done).sum()) if rejected_requests is None else rejected_requests
    idx = np.flatnonzero(done)
    if warmup_requests > 0 and idx.size:
        order = np.argsort(records.finish_us[idx], kind="stable")
        idx = np.sort(idx[order[warmup_requests:]])
    arrival = records.arrival_us[idx]
    first = records.first_token_us[idx]
    finish = records.finish_us[idx]
    osl = records.output_tokens[idx]
    ttft_ms = (first - arrival) / 1e3
    latency_ms = (finish - arrival) / 1e3
    multi = osl > 1
    itl_ms = (finish[multi] - first[multi]) / 1e3 / (osl[multi] - 1)
    per_user = 1e3 / itl_ms[itl_ms > 0]
    window_s = (finish.max() - arrival.min()) / 1e6 if idx.size else 0.0
    sim_s = float(records.finish_us.max() / 1e6) if done.any() else 0.0
    out_tokens = int(osl.sum())
    throughput = out_tokens / window_s if window_s > 0 else 0.0
    good = np.ones(idx.size, dtype=bool)
    if slo.ttft_ms is not None:
        good &= ttft_ms <= slo.ttft_ms
    if slo.itl_ms is not None:
        itl_all = np.zeros(idx.size)
        itl_all[multi] = itl_ms
        good &= itl_all <= slo.itl_ms
    if slo.e2e_ms is not None:
        good &= latency_ms <= slo.e2e_ms
    gpu_hours = gpus * sim_s / 3600.0
    inputs = int(records.input_tokens[idx].sum())
    window_gpu_hours = gpus * window_s / 3600.0  # the same window as the throughputs
    cost = window_gpu_hours * gpu_hour_usd / (out_tokens / 1e6) if out_tokens else float("inf")
    return Metrics(
        time_to_first_token=Stat.of(ttft_ms),
        inter_token_latency=Stat.of(itl_ms),
        request_latency=Stat.of(latency_ms),
        output_token_throughput_per_user=Stat.of(per_user),
        request_throughput=idx.size / window_s if window_s > 0 else 0.0,
        output_token_throughput=throughput,
        output_token_throughput_per_gpu=throughput / gpus,
        goodput=int(good.sum()) / window_s if window_s > 0 else 0.0,
        slo_attainment=int(good.sum()) / (idx.size + rejected) if idx.size + rejected else 0.0,
        prefix_cache_hit_rate=float(records.cached_tokens[idx].sum() / inputs) if inputs else 0.0,
        gpu_hours=gpu_hours,
        cost_per_million_output_tokens=cost,
        completed_requests=int(done.sum()),
        rejected_requests=rejected,
        preemptions=int(records.preemptions.sum()),
        gpus=float(gpus),
        utilization=utilization,
        simulated_requests=int((records.arrival_us >= 0).sum()),
        simulated_duration_s=sim_s,
        wall_s=wall_s,
        early_stop=early_stop,
    )
