"""Shared fixtures: small deterministic workloads and deployments that need no perf data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dynosim import DeploymentConfig, Request, Simulation
from dynosim.perf.linear import LinearStepTime
from dynosim.types import HASH_BLOCK_TOKENS

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"


def make_requests(
    n: int,
    *,
    rate_rps: float = 20.0,
    seed: int = 0,
    groups: int = 5,
    shared_units: int = 3,
    input_range: tuple[int, int] = (200, 4000),
    output_range: tuple[int, int] = (1, 600),
    closed_loop: int | None = None,
) -> list[Request]:
    """Poisson (or closed-loop) requests whose prompts start with one of ``groups`` prefixes."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    next_id = 1_000_000
    out = []
    for i in range(n):
        inp = int(rng.integers(*input_range))
        osl = int(rng.integers(*output_range))
        units = -(-inp // HASH_BLOCK_TOKENS)
        g = int(rng.integers(groups))
        shared = [g * 1000 + k for k in range(min(shared_units, units))]
        unique = list(range(next_id, next_id + units - len(shared)))
        next_id += units
        after = None
        arrival = float(arrivals[i])
        if closed_loop is not None:
            arrival = 0.0
            after = i - closed_loop if i >= closed_loop else None
        out.append(
            Request(
                id=i,
                arrival_s=arrival,
                input_tokens=inp,
                output_tokens=osl,
                block_hashes=tuple(shared + unique),
                after_id=after,
            )
        )
    return out


def tiny_config(**overrides: object) -> DeploymentConfig:
    """A 4-worker deployment with small batches (timing/KV are injected by the tests)."""
    data: dict[str, object] = {
        "model": "test/model",
        "gpu": "h200_sxm",
        "workers": 4,
        "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "block_size": 16},
    }
    data.update(overrides)
    return DeploymentConfig.from_dict(data)


@pytest.fixture
def linear_timing() -> LinearStepTime:
    """A fast, exact step-time model."""
    return LinearStepTime()


def assert_workers_empty(sim: Simulation) -> None:
    """Every worker of a finished simulation holds nothing: no KV, request or transfer."""
    for w in sim.workers:
        w.kv.check()
        assert w.kv.used == 0
        assert not w.running
        assert not w.waiting
        assert not w.inbox
        assert w.incoming == 0
        assert w.incoming_blocks == 0
