"""Replay measured points in the simulator and report the error per group.

Each replayable measurement becomes one aggregated worker (the row's model, GPU, backend, TP,
dtype; ``max_num_seqs`` = the concurrency unless the row says otherwise; prefix caching off, as
benchmark recipes run it), or for a disaggregated row its prefill and decode pools, driven by
the client that measured it: a named client as
:mod:`dynosim.workload.client` describes it, or a plain closed loop of ``concurrency`` clients
that start together, ``rounds`` requests each, fixed lengths. The simulated TTFT and TPOT are
the client's own means (:mod:`dynosim.validation.client_metrics`). A row the simulator cannot
build (unknown model, no step-time data, does not fit) is refused with the one-line reason.

Per group (model, GPU, backend, mode): rows, replayed, refused, and the MAPE and signed mean
error (bias) of TTFT and TPOT in percent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dynosim.config import DeploymentConfig, PoolName
from dynosim.errors import DynosimError
from dynosim.perf.calibration import (
    CalibrationProfile,
    HostCalibration,
    StepCalibration,
    load_profile,
)
from dynosim.perf.catalog import model_spec
from dynosim.perf.deployment import DeploymentPerf, resolve, resolve_pools
from dynosim.perf.overhead import NO_OVERHEAD, CalibratedStepTime
from dynosim.perf.roofline import physical_floor
from dynosim.simulation import Simulation
from dynosim.types import Request
from dynosim.validation.client_metrics import client_metrics
from dynosim.validation.measurement import Measurement
from dynosim.validation.silicon import closed_loop_requests
from dynosim.workload.client import BenchmarkClient, client_requests


@dataclass(frozen=True, slots=True)
class RowResult:
    """One measurement and its replay (NaN when refused)."""

    m: Measurement
    ttft_ms: float
    tpot_ms: float
    refused: str | None

    def error(self, metric: str) -> float:
        """Relative error (simulated / measured - 1) of ``ttft`` or ``tpot``."""
        sim = self.ttft_ms if metric == "ttft" else self.tpot_ms
        real = self.m.ttft_ms if metric == "ttft" else self.m.tpot_ms
        return sim / real - 1.0 if real > 0 else float("nan")


@dataclass(slots=True)
class Group:
    """The rows of one (model, GPU, backend, mode)."""

    key: tuple[str, str, str, str]
    rows: list[RowResult] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The group's figures (the ``groups`` entries of the JSON)."""
        run = [r for r in self.rows if r.refused is None]
        out: dict[str, Any] = {
            "model": self.key[0], "system": self.key[1], "backend": self.key[2],
            "mode": self.key[3], "rows": len(self.rows), "replayed": len(run),
            "refused": len(self.rows) - len(run),
        }  # fmt: skip
        for metric in ("ttft", "tpot"):
            err = np.array([r.error(metric) for r in run], dtype=np.float64)
            err = err[np.isfinite(err)]
            out[f"{metric}_mape"] = float(100 * np.abs(err).mean()) if err.size else None
            out[f"{metric}_bias"] = float(100 * err.mean()) if err.size else None
        reasons = sorted({r.refused for r in self.rows if r.refused is not None})
        out["refused_reasons"] = reasons[:5]
        return out


def recipe_engine(m: Measurement) -> dict[str, Any]:
    """Engine flags of a typical InferenceX recipe, for an InferenceX row of unknown recipe.

    Empty for other rows, and for rows that carry their own recipe's flags (``m.recipe``,
    :mod:`dynosim.validation.recipes`).

    From SemiAnalysis InferenceX's per-recipe launch scripts (as issue 9 quotes them): vLLM runs
    with ``--max-num-batched-tokens 2*ISL --no-enable-prefix-caching --block-size 32
    --gpu-memory-utilization 0.90`` and async scheduling on whatever the release (its
    ``benchmarks/70b_b200_slurm.sh`` passes ``--async-scheduling``,
    ``gptoss_fp4_h100_slurm.sh`` and ``gptoss_fp4_h200_slurm.sh`` write ``async-scheduling:
    true`` into their config); TRT-LLM with ``max_num_tokens = max(8192, round_up_64(c + ISL
    + 64))`` and no KV block reuse. SGLang recipes set
    ``--chunked-prefill-size``, ``--max-running-requests`` and ``--disable-radix-cache``, whose
    values are not recorded in the rows: only the radix cache is turned off. Their recipes for
    DeepSeek-R1 and Qwen3.5 on B200 and B300 also pass ``--scheduler-recv-interval``
    (:func:`_sglang_recv_interval`).
    """
    if m.client != "inferencex" or m.recipe:
        return {}
    if m.backend == "vllm":
        return {"max_num_batched_tokens": max(2 * m.isl, m.concurrency), "block_size": 32,
                "gpu_memory_utilization": 0.9, "enable_prefix_caching": False,
                "async_scheduling": True}  # fmt: skip
    if m.backend == "trtllm":
        tokens = max(8192, -(-(m.concurrency + m.isl + 64) // 64) * 64)
        return {"max_num_batched_tokens": tokens, "enable_prefix_caching": False}
    recipe: dict[str, Any] = {"enable_prefix_caching": False}
    interval = _sglang_recv_interval(m)
    if interval is not None:
        recipe["scheduler_recv_interval"] = interval
    return recipe


def _sglang_recv_interval(m: Measurement) -> int | None:
    """The ``--scheduler-recv-interval`` of an aggregated InferenceX SGLang row's recipe.

    InferenceX's single-node DeepSeek-R1 recipes on B200 and B300 (``dsr1_fp8_b200.sh``,
    ``dsr1_fp4_b200.sh``, ``dsr1_fp8_b300.sh``, ``dsr1_fp4_b300.sh``, the same rule since
    2025-09) and its Qwen3.5 ones of 2026-03 and 2026-04 (``qwen3.5_bf16_b200.sh``,
    ``qwen3.5_fp8_b200.sh``, ``qwen3.5_bf16_b300.sh``) pass 30 at concurrency >= 16 and 10
    below ("relax to ~30 requests between scheduler recv polls"); the FP8 DeepSeek-R1 TP4
    variant 10 at any concurrency; none with DP attention (1). Their H200 recipes pass none
    (None: SGLang's default, 1). Other rows: None. InferenceX has no DeepSeek-V3 recipe: its
    database dumps name its DeepSeek-R1 runs ``DeepSeek-V3`` (AIConfigurator's
    ``silicon_sample.csv``: all 97 DeepSeek-V3 B200 SGLang rows carry the measurements of
    DeepSeek-R1 B200 SGLang rows of the same shape, to the last digit), so they read the same.
    """
    name = m.model.split("/")[-1]
    if (
        m.pools is not None
        or m.backend != "sglang"
        or m.gpu not in ("b200_sxm", "b300_sxm")
        or m.attention_dp != 1
        or not (name.startswith(("DeepSeek-R1", "Qwen3.5-")) or name == "DeepSeek-V3")
    ):
        return None
    r1_tp4 = name.startswith("DeepSeek") and m.tp == 4 and m.dtype == "fp8"
    return 10 if m.concurrency < 16 or r1_tp4 else 30


def overlapped(m: Measurement) -> bool:
    """Whether the row's engine overlaps its scheduling with the GPU (vLLM async scheduling).

    False for a vLLM row that runs without it (:func:`recipe_engine`, then the row's own
    ``engine``); such a row's steps pay the profile's ``synchronous`` terms too.
    """
    return {**recipe_engine(m), **m.engine}.get("async_scheduling") is not False


def row_layers(m: Measurement) -> int:
    """The decoder layers of the row's model (what a profile's ``per_layer_us`` multiplies)."""
    return model_spec(m.model).layers


def row_config(m: Measurement, timing: str = "aic") -> DeploymentConfig:
    """The deployment a measurement ran on (one replica: ``attention_dp`` schedulers).

    Engine: ``max_num_seqs`` = the concurrency, no prefix caching, then the recipe's flags
    (:func:`recipe_engine`), then whatever the row itself states (its recipe's flags included:
    :mod:`dynosim.validation.recipes`). With attention DP the replica's ranks are workers of
    their own, behind the engine's DP balancer (:func:`_dp_router`); each rank's
    ``max_num_seqs`` (vLLM's ``--max-num-seqs`` and TRT-LLM's ``max_batch_size`` are per DP
    rank) does not stop a rank from taking more than its share of the clients.
    """
    if m.pools is not None:
        return _disagg_config(m, timing)
    engine = {
        "max_num_seqs": m.concurrency,
        "max_num_batched_tokens": max(8192, m.concurrency),
        "enable_prefix_caching": False,
        **recipe_engine(m),
        **m.engine,
    }
    data: dict[str, Any] = {
        "model": m.model, "gpu": m.gpu, "backend": m.backend, "dtype": m.dtype, "tp": m.tp,
        "workers": 1, "timing": timing, "engine": engine,
    }  # fmt: skip
    if m.attention_dp > 1:
        data["router"] = _dp_router(m.backend)
    if m.speculative is not None:
        data["speculative"] = m.speculative
    parallel = {"ep": m.ep, "moe_tp": m.moe_tp, "attention_dp": m.attention_dp,
                "kv_cache_dtype": m.kv_cache_dtype, "moe_activation": m.moe_activation,
                "fp8_scales": m.fp8_scales}  # fmt: skip
    data |= {k: v for k, v in parallel.items() if v not in (None, 1)}
    return DeploymentConfig.from_dict(data)


def _dp_router(backend: str) -> str:
    """How the engine spreads requests over its attention-DP ranks (one worker each here).

    vLLM's front end sends a request to the rank of lowest ``4 x waiting + running``
    (``DPLBAsyncMPClient.get_core_engine_for_request``, ``vllm/v1/engine/core_client.py``);
    TRT-LLM's executor gives new requests to the ranks with the fewest active ones
    (``ExecutorRequestQueue``'s attention-DP balancing): both ``least_loaded``. SGLang's
    ``DataParallelController`` defaults to ``--load-balance-method round_robin``.
    """
    return "round_robin" if backend == "sglang" else "least_loaded"


def _disagg_config(m: Measurement, timing: str) -> DeploymentConfig:
    """A disaggregated row's deployment: its two pools, each engine's batch as the row says.

    A prefill engine admits ``batch_size`` prompts (``max_num_batched_tokens`` at least their
    tokens), a decode engine ``batch_size`` requests per DP rank; prefix caching off and the
    recipe's other flags as for an aggregated row. The KV transfer link is the default
    (``auto``: NVLink within a node, RDMA across).
    """
    assert m.pools is not None
    recipe = {k: v for k, v in recipe_engine(m).items() if k != "max_num_batched_tokens"}
    data: dict[str, Any] = {
        "model": m.model, "gpu": m.gpu, "backend": m.backend, "dtype": m.dtype,
        "mode": "disagg", "timing": timing,
        "engine": {"enable_prefix_caching": False, **recipe, **m.engine},
    }  # fmt: skip
    for name, p in zip(("prefill", "decode"), m.pools, strict=True):
        tokens = p.batch_size * (m.isl if name == "prefill" else 1)
        pool: dict[str, Any] = {
            "tp": p.tp, "workers": p.workers,
            "engine": {"max_num_seqs": p.batch_size, "max_num_batched_tokens": max(8192, tokens)},
        }  # fmt: skip
        parallel = {"ep": p.ep, "moe_tp": p.moe_tp, "attention_dp": p.attention_dp}
        data[name] = pool | {k: v for k, v in parallel.items() if v not in (None, 1)}
    if m.kv_cache_dtype is not None:
        data["kv_cache_dtype"] = m.kv_cache_dtype
    return DeploymentConfig.from_dict(data)


def row_requests(m: Measurement, rounds: int) -> tuple[list[Request], int]:
    """The requests of the row's benchmark and its warm-up count."""
    if m.client is not None:
        name = m.client
        extra = {"requests": m.concurrency * rounds} if name == "aiperf" else {}
        if m.warmups is not None:
            extra["warmups"] = m.warmups
        streams = m.concurrency + m.queued
        c = BenchmarkClient(name=name, concurrency=streams, isl=m.isl, osl=m.osl, **extra)
        return client_requests(c), c.warmup_count
    return closed_loop_requests(m.concurrency, m.concurrency * rounds, m.isl, m.osl), 0


def row_perf(
    m: Measurement, step: StepCalibration, timing: str = "aic", *, floor: bool = False
) -> DeploymentPerf | dict[PoolName, DeploymentPerf]:
    """The row's deployment performance with the step calibration ``step`` (per pool if disagg).

    The kernel model is built without overhead and ``step`` is applied on top of it
    (:class:`~dynosim.perf.overhead.CalibratedStepTime`), so any step calibration, also a probe
    with zero kernel factors, can be replayed. ``floor``: bounded by the physical floor
    (:func:`~dynosim.perf.roofline.physical_floor`; never for probes, which must stay linear).
    """

    def calibrated(config: DeploymentConfig) -> DeploymentPerf:
        perf = resolve(config)
        low = physical_floor(config) if floor else None
        return replace(perf, timing=CalibratedStepTime(perf.timing, step, NO_OVERHEAD, low))

    config = replace(row_config(m, timing), framework_overhead_us=0.0)
    pools = resolve_pools(config, calibrated)
    return pools["agg"] if config.mode == "agg" else pools


def assume_client(m: Measurement, client: str) -> Measurement:
    """``m`` replayed as ``client`` if it records no client (``closed-loop``: left as it is).

    ``inferencex``: InferenceX's client without warm-up. ``queued``: the same client with one
    stream more than the engine admits (``concurrency + 1`` streams, the engine's
    ``max_num_seqs`` still the concurrency): each request waits for a slot to free, and its
    TTFT counts that wait, which adds about one inter-completion time (latency / c) to the
    mean TTFT and nothing to TPOT (the signature of AIConfigurator's Llama-3.1-8B TRT-LLM
    rows: at c = 8 their TTFT grows by 1.0 x ΔOSL x TPOT / c from OSL 128 to 512 on every TP
    and ISL, where InferenceX's client's does not grow at all).
    """
    if m.client is not None or client == "closed-loop":
        return m
    return replace(m, client="inferencex", warmups=0, queued=1 if client == "queued" else 0)


def replay(
    m: Measurement,
    *,
    rounds: int = 4,
    timing: str = "aic",
    profile: CalibrationProfile | None = None,
    step: StepCalibration | None = None,
    host: HostCalibration | None = None,
    host_in_sim: bool = False,
    unrecorded_client: str | None = None,
) -> RowResult:
    """Simulate one measurement (refused with the reason when it cannot run).

    ``profile`` (None: the shipped default) gives the step calibration and the host cost of the
    row's backend; ``step`` and ``host`` override them (calibration probes). The host cost is
    added to each request's TTFT and latency (:func:`client_metrics`), the form the fit
    assumes; ``host_in_sim`` gives it to the deployment's ``host:`` section instead
    (:mod:`dynosim.host`: the engine sees each request that much later, which also shifts the
    closed loop's schedule), as ``simulate`` does with a named profile. A streaming cost
    (``output_token_us``) is always simulated, by the server's default process count (the
    rows record none): its queue is what the closed loop waits for. A row that records no
    client is replayed as ``unrecorded_client`` (None: the profile's, for the row's backend
    and source), with the host delays the profile has for its source.
    """
    nan = float("nan")
    if m.refused is not None:
        return RowResult(m, nan, nan, m.refused)
    cal = (profile or load_profile()).backend(m.backend)
    cost = host or (cal.host_for(m.source) if m.client is None else cal.host)
    m = assume_client(m, unrecorded_client or cal.client_for(m.source))
    try:
        config = row_config(m, timing)
        if cost.output_token_us > 0 or (
            host_in_sim and (cost.request_us > 0 or cost.input_token_us > 0)
        ):
            config = replace(config, host=cost.host_config(m.backend, delays=host_in_sim))
            cost = HostCalibration() if host_in_sim else replace(cost, output_token_us=0.0)
        requests, warmup = row_requests(m, rounds)
        layers = row_layers(m) if cal.per_layer_us else 0
        floor = step is None and cal.roofline_floor
        perf = row_perf(m, step or cal.step_for(m.gpu, overlapped(m), layers), timing,
                        floor=floor)  # fmt: skip
        rec = Simulation(config, requests, perf=perf).run(warmup_requests=warmup).records
    except DynosimError as exc:
        return RowResult(m, nan, nan, str(exc))
    fig = client_metrics(rec, m.client or "vllm-bench", warmup, cost)
    if not fig:
        return RowResult(m, nan, nan, "no request completed")
    return (
        RowResult(m, fig["mean_ttft_ms"], fig["mean_tpot_ms"], None)
        if m.client != "aiperf"
        else RowResult(m, fig["time_to_first_token.avg"], fig["inter_token_latency.avg"], None)
    )


def validate(
    rows: Sequence[Measurement],
    *,
    rounds: int = 4,
    timing: str = "aic",
    profile: CalibrationProfile | None = None,
    host_in_sim: bool = False,
    progress: Callable[[int, int], None] | None = None,
    unrecorded_client: str | None = None,
) -> list[Group]:
    """Replay every row (with ``profile``, None: the default); groups in order of appearance.

    Rows that record no client are replayed as ``unrecorded_client`` (None: the profile's).
    """
    groups: dict[tuple[str, str, str, str], Group] = {}
    for i, m in enumerate(rows):
        result = replay(m, rounds=rounds, timing=timing, profile=profile, host_in_sim=host_in_sim,
                        unrecorded_client=unrecorded_client)  # fmt: skip
        groups.setdefault(m.group, Group(m.group)).rows.append(result)
        if progress is not None:
            progress(i + 1, len(rows))
    return list(groups.values())
