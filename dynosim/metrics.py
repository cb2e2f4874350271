"""Per-request records in, serving metrics out (AIPerf names, latencies in ms). Pure numpy."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from dynosim.config import SLOConfig

STAT_KEYS = ("avg", "min", "max", "p50", "p90", "p99")
NAN = float("nan")
"""The one NaN the metrics use, so that equal results compare equal (``[NAN] == [NAN]``)."""
LATENCY_METRICS = ("time_to_first_token", "inter_token_latency", "request_latency")


_QUANTILES = np.array([50.0, 90.0, 99.0]) / 100


def percentiles(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """p50, p90 and p99 of ``values``: ``numpy.percentile(values, [50, 90, 99])``, bit for bit.

    The same arithmetic as numpy's default ``linear`` method (``numpy/lib/_function_base_impl.py``
    ``_quantile``: virtual index ``(n - 1) q``, its floor and the next order statistic, and
    ``_lerp``'s two-sided interpolation), on a sorted copy. numpy's own call also runs
    ``np.unique`` on the indexes, whose first use imports ``numpy.ma`` (about 8 ms of a
    process's start-up); with a NaN among the values the result is NaN, as numpy's.
    """
    ordered = np.sort(values)
    n = ordered.size
    if ordered.dtype.kind == "f" and np.isnan(ordered[-1]):
        return np.full(3, np.nan)
    virtual = (n - 1) * _QUANTILES
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = -1
    following[above] = -1
    lo, hi = previous.astype(np.intp), following.astype(np.intp)
    gamma = virtual - lo
    a, b = ordered[lo], ordered[hi]
    diff = b - a
    out = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
    return out


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
            return cls(NAN, NAN, NAN, NAN, NAN, NAN)
        p50, p90, p99 = percentiles(values)
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
    prefill_worker: npt.NDArray[np.int64] | None = None
    transfer_us: npt.NDArray[np.int64] | None = None

    @property
    def completed(self) -> npt.NDArray[np.bool_]:
        """Mask of requests that completed."""
        return self.finish_us >= 0

    def equal(self, other: RequestRecords) -> bool:
        """True when every column is identical (an absent column equals one of -1 / 0)."""
        return all(
            np.array_equal(self._column(f.name), other._column(f.name)) for f in fields(self)
        )

    def _column(self, name: str) -> npt.NDArray[np.int64]:
        col = getattr(self, name)
        if col is None:
            fill = -1 if name == "prefill_worker" else 0
            return np.full(self.arrival_us.size, fill, dtype=np.int64)
        return col  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class GpuTimeline:
    """Provisioned GPUs over time: ``gpus[i]`` from ``times_us[i]`` until the next time."""

    times_us: npt.NDArray[np.int64]
    gpus: npt.NDArray[np.float64]

    @classmethod
    def fixed(cls, gpus: float) -> GpuTimeline:
        """A constant count from time 0."""
        return cls(np.zeros(1, dtype=np.int64), np.array([float(gpus)]))

    def gpu_us(self, t0_us: float, t1_us: float) -> float:
        """Integral of the provisioned GPUs over ``[t0_us, t1_us]`` (GPU-microseconds)."""
        if t1_us <= t0_us:
            return 0.0
        if self.gpus.size == 1:
            return float(self.gpus[0]) * (t1_us - t0_us)
        edges = np.append(self.times_us, np.iinfo(np.int64).max).astype(np.float64)
        lo = np.clip(edges[:-1], t0_us, t1_us)
        hi = np.clip(edges[1:], t0_us, t1_us)
        return float(((hi - lo) * self.gpus).sum())

    def mean(self, t0_us: float, t1_us: float) -> float:
        """Time-averaged GPUs over ``[t0_us, t1_us]`` (the count at ``t0_us`` if empty)."""
        if self.gpus.size == 1:
            return float(self.gpus[0])
        if t1_us <= t0_us:
            i = max(0, int(np.searchsorted(self.times_us, t0_us, side="right")) - 1)
            return float(self.gpus[i])
        return self.gpu_us(t0_us, t1_us) / (t1_us - t0_us)


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolMetrics:
    """One worker pool of the deployment (``agg``, or ``prefill`` and ``decode``).

    ``workers`` and ``gpus`` are time-averaged over the run (provisioned: starting, active and
    draining workers); ``utilization`` is busy engine time over provisioned worker time;
    ``queue_time`` the time (ms) a measured request waited in this pool between arriving at a
    worker and being admitted to its batch; ``kv_usage`` the mean KV-block usage of the active
    workers over the planner's samples (NaN when nothing sampled the pools).
    """

    name: str
    tp: int
    workers: float
    peak_workers: int
    gpus: float
    utilization: float
    queue_time: Stat
    kv_usage: float
    scaling_events: int


@dataclass(frozen=True, slots=True)
class HostMetrics:
    """What the host processes did (times in ms, like the other metrics).

    Attributes:
        processes: Processes per replica (0: unbounded).
        tokenize_utilization: Tokenisation time over the entry pool's process time
            (replica-time x processes); NaN with unbounded processes.
        stream_utilization: Detokenisation and streaming time over the decode (or aggregated)
            pool's process time; NaN with unbounded processes.
        tokenize_queue_time: Per request, the wait for a free process before tokenisation.
        stream_delay: Per request, how much later than ``output_token_us`` after the engine's
            last token the client received it (the streaming backlog).
    """

    processes: int
    tokenize_utilization: float
    stream_utilization: float
    tokenize_queue_time: Stat
    stream_delay: Stat


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFacts:
    """What the run provisioned and did besides the per-request records.

    Attributes:
        gpus: The deployment's GPUs (constant unless ``gpu_timeline`` says otherwise).
        gpu_hour_usd: The price of one GPU hour.
        utilization: Busy worker time over provisioned worker time.
        rejected_requests: For a stopped run, the requests rejected (the unfinished ones are
            not); None: every request that did not complete.
        gpu_timeline: The provisioned GPUs over time, when a planner changed them.
        pools: Each pool's figures.
        timeline: The pool samples, per pool, when the pools were sampled.
        scaling_events: Scale-ups and scale-downs of all pools.
    """

    gpus: float
    gpu_hour_usd: float
    utilization: float = NAN
    rejected_requests: int | None = None
    gpu_timeline: GpuTimeline | None = None
    pools: tuple[PoolMetrics, ...] = ()
    timeline: dict[str, Any] | None = None
    scaling_events: int = 0


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
    kv_transfer_time: Stat = field(default_factory=lambda: Stat(NAN, NAN, NAN, NAN, NAN, NAN))
    scaling_events: int = 0
    early_stop: str | None = None
    pools: tuple[PoolMetrics, ...] = ()
    timeline: dict[str, Any] | None = None
    host: HostMetrics | None = None

    @property
    def speedup(self) -> float:
        """Simulated time over wall time."""
        return self.simulated_duration_s / self.wall_s if self.wall_s > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """Nested plain data keyed by metric name (JSON-ready; NaN stays NaN)."""
        out = asdict(self)
        if self.host is None:  # no host section: the same keys as before there was one
            del out["host"]
        out["speedup"] = self.speedup
        return out

    def flat(self) -> dict[str, float]:
        """One level: ``time_to_first_token.p90``, ``goodput``, ... (as objectives name them).

        The per-pool figures and the timeline are in :meth:`to_dict` only.
        """
        out: dict[str, float] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Stat):
                out.update({f"{f.name}.{k}": float(getattr(value, k)) for k in STAT_KEYS})
            elif isinstance(value, int | float) and not isinstance(value, bool):
                out[f.name] = float(value)
        if self.host is not None:  # host.stream_utilization, host.tokenize_queue_time.p90, ...
            for f in fields(self.host):
                value = getattr(self.host, f.name)
                if isinstance(value, Stat):
                    out.update({f"host.{f.name}.{k}": float(getattr(value, k)) for k in STAT_KEYS})
                else:
                    out[f"host.{f.name}"] = float(value)
        out["speedup"] = self.speedup
        return out

    def deterministic_dict(self) -> dict[str, Any]:
        """``to_dict`` without the wall-clock fields, for bit-identity checks."""
        out = self.to_dict()
        del out["wall_s"], out["speedup"]
        return out


def measured(records: RequestRecords, warmup_requests: int) -> npt.NDArray[np.int64]:
    """Indices of the measured requests, in workload order.

    The completed requests, the first ``warmup_requests`` to complete left out.
    """
    idx = np.flatnonzero(records.completed)
    if warmup_requests > 0 and idx.size:
        order = np.argsort(records.finish_us[idx], kind="stable")
        idx = np.sort(idx[order[warmup_requests:]])
    return idx


def summarize(
    records: RequestRecords,
    facts: RunFacts,
    *,
    slo: SLOConfig,
    warmup_requests: int,
    wall_s: float,
    early_stop: str | None = None,
) -> Metrics:
    """Turn per-request records (and what the run provisioned, ``facts``) into metrics.

    The first ``warmup_requests`` requests to complete are left out of every figure. The
    benchmark window runs from the earliest arrival among the measured requests to the last
    completion; throughputs and the cost per output token are over that window, GPU hours over
    the whole simulation (from time 0). ``slo_attainment`` is the fraction of the measured and
    the rejected requests that completed within every SLO (DistServe's attainment; a rejected
    request never meets its SLO). ``utilization``, ``early_stop`` (why the run was stopped
    before the end) and, for a stopped run, the count of rejected requests come from the
    caller.

    With ``facts.gpu_timeline`` (a planner changed the provisioned GPUs), ``gpus`` is their
    time average over the benchmark window, which the per-GPU throughput and the cost use, and
    ``gpu_hours`` their integral from time 0; otherwise ``gpus`` is constant.
    """
    rejected_requests, gpu_timeline = facts.rejected_requests, facts.gpu_timeline
    done = records.completed
    rejected = int((~done).sum()) if rejected_requests is None else rejected_requests
    idx = measured(records, warmup_requests)
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
    if gpu_timeline is None:
        gpu_timeline = GpuTimeline.fixed(facts.gpus)
    w0 = float(arrival.min()) if idx.size else 0.0
    w1 = float(finish.max()) if idx.size else 0.0
    gpus = gpu_timeline.mean(w0, w1)
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
    gpu_hours = gpu_timeline.gpu_us(0.0, sim_s * 1e6) / 3.6e9
    inputs = int(records.input_tokens[idx].sum())
    window_gpu_hours = gpus * window_s / 3600.0  # the same window as the throughputs
    cost = (
        window_gpu_hours * facts.gpu_hour_usd / (out_tokens / 1e6) if out_tokens else float("inf")
    )
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
        utilization=facts.utilization,
        simulated_requests=int((records.arrival_us >= 0).sum()),
        simulated_duration_s=sim_s,
        wall_s=wall_s,
        kv_transfer_time=Stat.of(_transfer_ms(records, idx)),
        scaling_events=facts.scaling_events,
        early_stop=early_stop,
        pools=facts.pools,
        timeline=facts.timeline,
    )


def _transfer_ms(records: RequestRecords, idx: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """KV-transfer times (ms, queueing on the link included) of the measured remote prefills."""
    if records.transfer_us is None or records.prefill_worker is None:
        return np.zeros(0)
    remote = idx[records.prefill_worker[idx] >= 0]
    return records.transfer_us[remote] / 1e3
