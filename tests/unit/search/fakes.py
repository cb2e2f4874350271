"""A fast analytic stand-in for ``dynosim.simulate`` and tiny spaces/studies for search tests."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynosim.config import DeploymentConfig
from dynosim.errors import InfeasibleError
from dynosim.types import Request
from search.study.objectives import metric_names
from search.study.study_file import parse_study


class FakeMetrics:
    """Has ``flat()`` like ``dynosim.metrics.Metrics``."""

    def __init__(self, values: dict[str, float]) -> None:
        self._values = values

    def flat(self) -> dict[str, float]:
        return dict(self._values)


def simulate(
    config: DeploymentConfig,
    requests: Sequence[Request],
    *,
    seed: int = 0,
    warmup_requests: int = 0,
) -> FakeMetrics:
    """Deterministic trade-off: more sequences = more throughput per GPU, less per user.

    ``tp == 8`` with ``max_num_seqs > 128`` "does not fit" (InfeasibleError). The environment
    variable ``FAKE_SIM_SLEEP`` adds a delay (seconds) per call; ``FAKE_SIM_DIE_MARKER`` makes
    the first call in any process kill its process (a worker death), once.
    """
    marker = os.environ.get("FAKE_SIM_DIE_MARKER")
    if marker and not Path(marker).exists():
        Path(marker).write_text("died")
        os._exit(1)
    time.sleep(float(os.environ.get("FAKE_SIM_SLEEP", "0")))
    e = config.engine
    if config.tp == 8 and e.max_num_seqs > 128:
        raise InfeasibleError("model does not fit: KV cache has no room")
    load = math.log2(e.max_num_seqs)
    boost = 1.1 if e.enable_prefix_caching else 1.0
    boost *= 1.0 + 0.05 * config.kv_router.overlap_weight if config.router == "kv_aware" else 1.0
    per_gpu = 100.0 * load * boost / (1.0 + 0.15 * config.tp) + 0.001 * len(requests)
    per_user = 400.0 / load * (1.0 + 0.25 * config.tp)
    ttft = 50.0 * e.max_num_seqs / config.tp
    values = dict.fromkeys(metric_names(), 1.0)
    values.update(
        {
            "output_token_throughput_per_gpu": per_gpu,
            "output_token_throughput_per_user.avg": per_user,
            "time_to_first_token.p90": ttft,
            "wall_s": 0.0,
        }
    )
    return FakeMetrics(values)


def tiny_requests(n: int = 20) -> list[Request]:
    return [Request(id=i, arrival_s=0.1 * i, input_tokens=100, output_tokens=20) for i in range(n)]


SPACE: dict[str, Any] = {
    "knobs": {
        "tp": {"type": "choice", "values": [1, 2, 4, 8]},
        "router": {"type": "choice", "values": ["round_robin", "kv_aware"]},
        "kv_router.overlap_weight": {
            "type": "float", "low": 0.0, "high": 2.0, "step": 1.0, "when": {"router": "kv_aware"},
        },
        "engine.max_num_seqs": {"type": "int", "low": 16, "high": 256, "log": True,
                                "grid": [16, 64, 256]},
        "engine.enable_prefix_caching": {"type": "choice", "values": [True, False]},
    }
}  # fmt: skip
"""Grid: 4 tp x (1 + 3) router/weight x 3 seqs x 2 caching = 96 points."""


def study_dict(tmp_path: Path, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "h200_sxm",
        "gpu_budget": 8,
        "workload": {"file": "unused.yaml"},
        "space": SPACE,
        "objectives": [
            {"metric": "output_token_throughput_per_gpu", "direction": "maximize"},
            {"metric": "output_token_throughput_per_user", "direction": "maximize"},
        ],
        "constraints": ["time_to_first_token.p90 <= 2000"],
        "optimizer": {"name": "optuna-nsga2", "population": 8},
        "budget": {"max_trials": 24, "tol": 0.0, "patience": 100},
        "executor": {"kind": "local"},
        "storage": str(tmp_path / "s.journal"),
        "seed": 0,
        "simulator": "tests.unit.search.fakes:simulate",
    }
    data.update(fields)
    return data


def study(tmp_path: Path, **fields: Any) -> Any:
    return parse_study(study_dict(tmp_path, **fields), base_dir=tmp_path)


def simulate_total(
    config: DeploymentConfig,
    requests: Sequence[Request],
    *,
    seed: int = 0,
    warmup_requests: int = 0,
) -> FakeMetrics:
    """:func:`simulate` plus the deployment's total throughput (per GPU x its GPUs)."""
    m = simulate(config, requests, seed=seed, warmup_requests=warmup_requests).flat()
    m["output_token_throughput"] = m["output_token_throughput_per_gpu"] * config.tp * config.workers
    return FakeMetrics(m)


BUDGET_SPACE: dict[str, Any] = {
    "knobs": {
        "tp": {"type": "choice", "values": [1, 2, 4, 8]},
        "workers": {"type": "int", "low": 1, "high": 16},
        "engine.max_num_seqs": {"type": "choice", "values": [16, 64, 256]},
        "engine.enable_prefix_caching": {"type": "choice", "values": [True, False]},
    }
}
"""384 points, 90 within an 8-GPU budget (tp x workers <= 8): 77% are refused unsimulated."""
