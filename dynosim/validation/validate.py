"""Replay measured points in the simulator and report the error per group.

Each replayable measurement becomes one aggregated worker (the row's model, GPU, backend, TP,
dtype; ``max_num_seqs`` = the concurrency unless the row says otherwise; prefix caching off, as
benchmark recipes run it) driven by the client that measured it: a named client as
:mod:`dynosim.workload.client` describes it, or a plain closed loop of ``concurrency`` clients
that start together, ``rounds`` requests each, fixed lengths. The simulated TTFT and TPOT are
the client's own means (:mod:`dynosim.validation.client_metrics`). A row the simulator cannot
build (unknown model, no step-time data, does not fit) is refused with the one-line reason.

Per group (model, GPU, backend, mode): rows, replayed, refused, and the MAPE and signed mean
error (bias) of TTFT and TPOT in percent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dynosim.config import DeploymentConfig
from dynosim.errors import DynosimError
from dynosim.simulation import Simulation
from dynosim.types import Request
from dynosim.validation.client_metrics import client_metrics
from dynosim.validation.measurements import Measurement
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
    """Engine flags of the recipe that produced an InferenceX row (empty for other rows).

    From SemiAnalysis InferenceX's per-recipe launch scripts (as issue 9 quotes them): vLLM runs
    with ``--max-num-batched-tokens 2*ISL --no-enable-prefix-caching --block-size 32
    --gpu-memory-utilization 0.90``; TRT-LLM with ``max_num_tokens = max(8192,
    round_up_64(c + ISL + 64))`` and no KV block reuse. SGLang recipes set
    ``--chunked-prefill-size``, ``--max-running-requests`` and ``--disable-radix-cache``, whose
    values are not recorded in the rows: only the radix cache is turned off.
    """
    if m.client != "inferencex":
        return {}
    if m.backend == "vllm":
        return {"max_num_batched_tokens": max(2 * m.isl, m.concurrency), "block_size": 32,
                "gpu_memory_utilization": 0.9, "enable_prefix_caching": False}  # fmt: skip
    if m.backend == "trtllm":
        tokens = max(8192, -(-(m.concurrency + m.isl + 64) // 64) * 64)
        return {"max_num_batched_tokens": tokens, "enable_prefix_caching": False}
    return {"enable_prefix_caching": False}


def row_config(m: Measurement, timing: str = "aic") -> DeploymentConfig:
    """The deployment a measurement ran on (one worker).

    Engine: ``max_num_seqs`` = the concurrency, no prefix caching, then the recipe's flags
    (:func:`recipe_engine`), then whatever the row itself states.
    """
    engine = {
        "max_num_seqs": m.concurrency,
        "max_num_batched_tokens": max(8192, m.concurrency),
        "enable_prefix_caching": False,
        **recipe_engine(m),
        **m.engine,
    }
    return DeploymentConfig.from_dict({
        "model": m.model, "gpu": m.gpu, "backend": m.backend, "dtype": m.dtype, "tp": m.tp,
        "workers": 1, "timing": timing, "engine": engine,
    })  # fmt: skip


def row_requests(m: Measurement, rounds: int) -> tuple[list[Request], int]:
    """The requests of the row's benchmark and its warm-up count."""
    if m.client is not None:
        name = m.client
        extra = {"requests": m.concurrency * rounds} if name == "aiperf" else {}
        c = BenchmarkClient(name=name, concurrency=m.concurrency, isl=m.isl, osl=m.osl, **extra)
        return client_requests(c), c.warmup_count
    return closed_loop_requests(m.concurrency, m.concurrency * rounds, m.isl, m.osl), 0


def replay(m: Measurement, *, rounds: int = 4, timing: str = "aic") -> RowResult:
    """Simulate one measurement (refused with the reason when it cannot run)."""
    nan = float("nan")
    if m.refused is not None:
        return RowResult(m, nan, nan, m.refused)
    try:
        config = row_config(m, timing)
        requests, warmup = row_requests(m, rounds)
        rec = Simulation(config, requests).run(warmup_requests=warmup).records
    except DynosimError as exc:
        return RowResult(m, nan, nan, str(exc))
    fig = client_metrics(rec, m.client or "vllm-bench", warmup)
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
    progress: Callable[[int, int], None] | None = None,
) -> list[Group]:
    """Replay every row; the groups in order of first appearance."""
    groups: dict[tuple[str, str, str, str], Group] = {}
    for i, m in enumerate(rows):
        groups.setdefault(m.group, Group(m.group)).rows.append(replay(m, rounds=rounds,
                                                                      timing=timing))  # fmt: skip
        if progress is not None:
            progress(i + 1, len(rows))
    return list(groups.values())
