"""What a simulation records as it runs, and what it hands back at the end.

:class:`Recorder` holds the per-request columns the simulation fills in (arrival, completion,
workers, KV transfer, each leg's engine state) and the pools' timeline samples; at the end it
turns them into :class:`~dynosim.metrics.RequestRecords`, the pools' figures and the
:class:`~dynosim.metrics.RunFacts` that :func:`~dynosim.metrics.summarize` needs.
:class:`SimResult` is everything one run produced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dynosim.metrics import (
    NAN,
    GpuTimeline,
    HostMetrics,
    Metrics,
    PoolMetrics,
    RequestRecords,
    RunFacts,
    Stat,
    measured,
    summarize,
)

if TYPE_CHECKING:
    from dynosim.cluster.planner import PoolSample
    from dynosim.cluster.pool import WorkerPool
    from dynosim.config import DeploymentConfig, PoolName
    from dynosim.engine.state import RunningRequest
    from dynosim.host import Host
    from dynosim.types import Request


@dataclass(frozen=True, slots=True)
class SimResult:
    """Everything a simulation produced."""

    records: RequestRecords
    metrics: Metrics
    rejections: dict[int, str]
    steps: int
    events: int
    kv_bytes_sent: int = 0
    kv_bytes_received: int = 0


class Recorder:
    """The run's bookkeeping, per request and per pool sample.

    The simulation writes the columns as requests progress; the methods read them at the end.
    Times are integer microseconds; -1 means "not (yet)".

    Attributes:
        arrival_us: When each request arrived.
        finish_us: When the client saw its last token.
        worker: The worker that serves it (the decode worker when disaggregated).
        prefill_worker: The prefill worker of a remotely prefilled request.
        transfer_us: How long its KV took to reach the decode worker (link queueing included).
        state: Its leg on ``worker``, as the engine saw it.
        prefill_state: Its prefill leg (disaggregated serving).
        rejections: Why each rejected request was rejected.
        kv_bytes_received: KV bytes that reached the decode workers.
        samples: Per pool, the timeline's samples.
    """

    def __init__(
        self,
        requests: Sequence[Request],
        pools: Mapping[PoolName, WorkerPool],
        host: Host | None,
    ) -> None:
        n = len(requests)
        self.requests = requests
        self.pools = pools
        self.host = host
        self.arrival_us = np.full(n, -1, dtype=np.int64)
        self.finish_us = np.full(n, -1, dtype=np.int64)
        self.worker = np.full(n, -1, dtype=np.int64)
        self.prefill_worker = np.full(n, -1, dtype=np.int64)
        self.transfer_us = np.zeros(n, dtype=np.int64)
        self.state: list[RunningRequest | None] = [None] * n
        self.prefill_state: list[RunningRequest | None] = [None] * n
        self.rejections: dict[int, str] = {}
        self.kv_bytes_received = 0
        self.samples: dict[str, list[PoolSample]] = {name: [] for name in pools}

    def result(
        self,
        config: DeploymentConfig,
        warmup: int,
        *,
        wall_s: float,
        early_stop: str | None,
        gpu_hour_usd: float,
        sampled: bool,
        kv_bytes_sent: int,
    ) -> SimResult:
        """The run's records and metrics, at its end.

        Args:
            config: The deployment simulated.
            warmup: The requests to complete first that are not measured.
            wall_s: The run's wall time.
            early_stop: Why the run was stopped early (None: it ran to the end).
            gpu_hour_usd: The price of one GPU hour.
            sampled: The pools were sampled (there is a timeline).
            kv_bytes_sent: KV bytes the links carried.

        Raises:
            RuntimeError: A run that ran to the end left requests neither finished nor rejected.
        """
        records = self.records()
        if early_stop is None:
            rejected = np.zeros(len(self.requests), dtype=bool)
            rejected[list(self.rejections)] = True
            lost = np.flatnonzero((records.finish_us < 0) & ~rejected)
            if lost.size:
                raise RuntimeError(
                    f"{lost.size} requests neither finished nor rejected: {lost[:5]}"
                )
        end_us = int(max(records.finish_us.max(initial=0), records.arrival_us.max(initial=0)))
        facts = self.facts(
            records,
            end_us,
            warmup,
            gpus=config.gpus,
            gpu_hour_usd=gpu_hour_usd,
            planned=config.planner is not None,
            sampled=sampled,
        )
        metrics = summarize(
            records,
            facts,
            slo=config.slo,
            warmup_requests=warmup,
            wall_s=wall_s,
            early_stop=early_stop,
        )
        if self.host is not None:
            metrics = dataclasses.replace(metrics, host=self.host_metrics(records, warmup, end_us))
        workers = [w for p in self.pools.values() for w in p.workers]
        return SimResult(
            records=records,
            metrics=metrics,
            rejections=dict(self.rejections),
            steps=sum(w.steps for w in workers),
            events=sum(w.events for w in workers),
            kv_bytes_sent=kv_bytes_sent,
            kv_bytes_received=self.kv_bytes_received,
        )

    def first_token_us(self, rid: int) -> int:
        """When request ``rid``'s first token was seen (by the client, with a host), or -1."""
        if self.host is not None and self.host.first_us[rid] >= 0:  # as the client saw it
            return int(self.host.first_us[rid])
        rr = self.state[rid]
        return rr.first_token_us if rr is not None else -1

    def records(self) -> RequestRecords:
        """The per-request records so far."""
        n = len(self.requests)
        first = np.full(n, -1, dtype=np.int64)
        cached = np.zeros(n, dtype=np.int64)
        preempt = np.zeros(n, dtype=np.int64)
        for rid, rr in enumerate(self.state):
            if rr is not None:
                first[rid] = rr.first_token_us
                cached[rid] = rr.cached_tokens
                preempt[rid] = rr.preemptions
            pr = self.prefill_state[rid]
            if pr is not None:
                preempt[rid] += pr.preemptions
                if rr is None:
                    cached[rid] = pr.cached_tokens
        if self.host is not None and self.host.streams:  # the client's first token
            first = np.where(self.host.first_us >= 0, self.host.first_us, first)
        return RequestRecords(
            arrival_us=self.arrival_us.copy(),
            first_token_us=first,
            finish_us=self.finish_us.copy(),
            input_tokens=np.fromiter((r.input_tokens for r in self.requests), np.int64, n),
            output_tokens=np.fromiter((r.output_tokens for r in self.requests), np.int64, n),
            cached_tokens=cached,
            worker=self.worker.copy(),
            preemptions=preempt,
            prefill_worker=self.prefill_worker.copy(),
            transfer_us=self.transfer_us.copy(),
        )

    def facts(
        self,
        records: RequestRecords,
        end_us: int,
        warmup: int,
        *,
        gpus: float,
        gpu_hour_usd: float,
        planned: bool,
        sampled: bool,
    ) -> RunFacts:
        """What the run provisioned over ``[0, end_us]``, for :func:`~dynosim.metrics.summarize`.

        Args:
            records: The records, as :meth:`records` made them.
            end_us: The end of the run (its last completion or arrival).
            warmup: The requests to complete first that are not measured.
            gpus: The deployment's GPUs.
            gpu_hour_usd: The price of one GPU hour.
            planned: A planner scaled the pools (the GPUs change over time).
            sampled: The pools were sampled (there is a timeline).
        """
        return RunFacts(
            gpus=gpus,
            gpu_hour_usd=gpu_hour_usd,
            utilization=self.utilization(end_us),
            rejected_requests=len(self.rejections),
            gpu_timeline=self.gpu_timeline() if planned else None,
            pools=self.pool_metrics(records, end_us, warmup),
            timeline=self.timeline() if sampled else None,
            scaling_events=sum(p.scaling_events for p in self.pools.values()),
        )

    def utilization(self, end_us: int) -> float:
        """Busy time of the workers over their provisioned time (0 for an empty run)."""
        busy = sum(w.busy_us for p in self.pools.values() for w in p.workers)
        worker_us = sum(pool_worker_us(p, end_us) for p in self.pools.values())
        return busy / worker_us if worker_us > 0 else 0.0

    def gpu_timeline(self) -> GpuTimeline:
        """Provisioned GPUs of all pools over time."""
        times = sorted({t for p in self.pools.values() for t, _ in p.gpu_changes})
        gpus = np.zeros(len(times))
        for p in self.pools.values():
            own = pool_timeline(p)
            gpus += own.gpus[np.searchsorted(own.times_us, times, side="right") - 1]
        return GpuTimeline(np.array(times, dtype=np.int64), gpus)

    def pool_metrics(
        self, records: RequestRecords, end_us: int, warmup: int
    ) -> tuple[PoolMetrics, ...]:
        """Each pool's figures over ``[0, end_us]`` (queue times of the measured requests)."""
        rids = measured(records, warmup).tolist()
        out = []
        for name, pool in self.pools.items():
            worker_us = pool_worker_us(pool, end_us)
            legs = self.prefill_state if name == "prefill" else self.state
            waits = [
                (rr.admitted_us - rr.enqueued_us) / 1e3
                for rid in rids
                if (rr := legs[rid]) is not None and rr.admitted_us >= 0
            ]
            kv = [s.kv_usage for s in self.samples[name]]
            counts = [g for _, g in pool.gpu_changes]
            out.append(
                PoolMetrics(
                    name=name,
                    tp=pool.tp,
                    workers=worker_us / end_us if end_us > 0 else float(len(pool.active)),
                    peak_workers=max(counts) // pool.tp,
                    gpus=pool.tp * worker_us / end_us if end_us > 0 else float(pool.gpus),
                    utilization=(
                        sum(w.busy_us for w in pool.workers) / worker_us if worker_us else 0.0
                    ),
                    queue_time=Stat.of(np.array(waits, dtype=np.float64)),
                    kv_usage=float(np.mean(kv)) if kv else NAN,
                    scaling_events=pool.scaling_events,
                )
            )
        return tuple(out)

    def timeline(self) -> dict[str, object]:
        """Columns of the pool samples, per pool: time (s), workers, queue, KV usage."""
        out: dict[str, object] = {}
        for name, rows in self.samples.items():
            out[name] = {
                "t_s": [s.t_us / 1e6 for s in rows],
                "provisioned_workers": [s.provisioned for s in rows],
                "active_workers": [s.active for s in rows],
                "waiting": [s.waiting for s in rows],
                "running": [s.running for s in rows],
                "kv_usage": [s.kv_usage for s in rows],
            }
        return out

    def host_metrics(self, records: RequestRecords, warmup: int, end_us: int) -> HostMetrics:
        """The host processes' figures over the measured requests (a host must be set).

        The entry pool tokenises, the decode pool streams (the same pool when aggregated).
        """
        assert self.host is not None
        pools = self.pools
        entry = pools["prefill"] if "prefill" in pools else pools["agg"]
        decode = pools["decode"] if "decode" in pools else pools["agg"]
        return self.host.metrics(
            measured(records, warmup), pool_worker_us(entry, end_us), pool_worker_us(decode, end_us)
        )


def pool_timeline(pool: WorkerPool) -> GpuTimeline:
    """Provisioned GPUs of ``pool`` over time."""
    ts = np.array([t for t, _ in pool.gpu_changes], dtype=np.int64)
    gs = np.array([g for _, g in pool.gpu_changes], dtype=np.float64)
    return GpuTimeline(ts, gs)


def pool_worker_us(pool: WorkerPool, end_us: int) -> float:
    """Provisioned worker-time of ``pool`` over ``[0, end_us]``."""
    return pool_timeline(pool).gpu_us(0.0, float(end_us)) / pool.tp
