"""Closed-loop replays of AIConfigurator's real-GPU measurements (``silicon_sample.csv``).

Each row of that file is a benchmark of one aggregated deployment at a fixed input/output
length and a fixed concurrency ``c`` (= batch size): ``c`` clients each send their next request
as soon as the previous one completes. ``replay`` runs the same benchmark in the simulator and
returns its mean TTFT and TPOT, so a step-time model and framework overhead can be checked
against the measured ones. Only some rows may be used for calibration (see
``CALIBRATION_GROUPS``); the others are for validation.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from dynosim.config import DeploymentConfig
from dynosim.perf.deployment import DeploymentPerf
from dynosim.simulation import Simulation
from dynosim.types import Request

CALIBRATION_GROUPS = (
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "trtllm"),
    ("Qwen/Qwen3-32B", "h100_sxm", "trtllm"),
    ("Qwen/Qwen3-32B", "h100_sxm", "sglang"),
)
_DTYPES = {"": "bf16", "fp8fp8": "fp8", "fp8fp8_block": "fp8"}


def silicon_csv() -> Path:
    """Where the installed aiconfigurator-core keeps its silicon measurements."""
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).parent / "systems" / "silicon_sample.csv"


@dataclass(frozen=True, slots=True, kw_only=True)
class SiliconRow:
    """One real-GPU measurement of an aggregated deployment."""

    model: str
    gpu: str
    backend: str
    dtype: str
    tp: int
    concurrency: int
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float


def load_rows(model: str, gpu: str, backend: str, path: Path | None = None) -> list[SiliconRow]:
    """Aggregated-mode, default-precision rows of one (model, GPU, backend) group."""
    rows = []
    with (path or silicon_csv()).open(newline="") as f:
        for r in csv.DictReader(f):
            if (r["model_path"], r["system"], r["backend"], r["mode"]) != (
                model,
                gpu,
                backend,
                "agg",
            ):
                continue
            quant = r["precision"] + r["gemm_quant_mode"]
            if quant not in _DTYPES or int(r["pp_size"] or 1) != 1:
                continue
            rows.append(
                SiliconRow(
                    model=model,
                    gpu=gpu,
                    backend=backend,
                    dtype=_DTYPES[quant],
                    tp=int(r["tp_size"]),
                    concurrency=int(r["batch_size"]),
                    isl=int(r["isl"]),
                    osl=int(r["osl"]),
                    ttft_ms=float(r["silicon_ttft_ms"]),
                    tpot_ms=float(r["silicon_tpot_ms"]),
                )
            )
    return rows


def closed_loop_requests(concurrency: int, n: int, isl: int, osl: int) -> list[Request]:
    """``n`` fixed-length requests from ``concurrency`` clients that all start at time 0."""
    return [
        Request(
            id=i,
            arrival_s=0.0,
            input_tokens=isl,
            output_tokens=osl,
            after_id=i - concurrency if i >= concurrency else None,
        )
        for i in range(n)
    ]


def row_config(row: SiliconRow, *, max_num_batched_tokens: int = 8192) -> DeploymentConfig:
    """The deployment a row measured: one worker, batch size = concurrency, no prefix reuse."""
    return DeploymentConfig.from_dict(
        {
            "model": row.model,
            "gpu": row.gpu,
            "backend": row.backend,
            "dtype": row.dtype,
            "tp": row.tp,
            "workers": 1,
            "engine": {
                "max_num_seqs": row.concurrency,
                "max_num_batched_tokens": max(max_num_batched_tokens, row.concurrency),
                "enable_prefix_caching": False,
            },
        }
    )


@dataclass(frozen=True, slots=True)
class Replay:
    """Simulated against measured means for one row."""

    row: SiliconRow
    ttft_ms: float
    tpot_ms: float

    @property
    def ttft_error(self) -> float:
        """Relative TTFT error (simulated / measured - 1)."""
        return self.ttft_ms / self.row.ttft_ms - 1.0

    @property
    def tpot_error(self) -> float:
        """Relative TPOT error (simulated / measured - 1)."""
        return self.tpot_ms / self.row.tpot_ms - 1.0


def replay(row: SiliconRow, *, rounds: int = 4, perf: DeploymentPerf | None = None) -> Replay:
    """Run the row's closed-loop benchmark (``rounds`` requests per client) in the simulator.

    ``perf`` replaces the deployment's own performance model (calibration tries overheads).
    """
    config = row_config(row)
    requests = closed_loop_requests(row.concurrency, row.concurrency * rounds, row.isl, row.osl)
    metrics = Simulation(config, requests, perf=perf).run().metrics
    return Replay(row, metrics.time_to_first_token.avg, metrics.inter_token_latency.avg)
