"""The simulator on the real Mooncake traces with AIConfigurator step times."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dynosim import DeploymentConfig, Simulation
from dynosim.perf.deployment import resolve
from dynosim.workload import head, load_trace
from tests.conftest import TRACES

pytestmark = pytest.mark.traces

BASE = DeploymentConfig.from_dict(
    {
        "model": "meta-llama/Meta-Llama-3.1-8B",
        "gpu": "h200_sxm",
        "backend": "vllm",
        "tp": 1,
        "workers": 8,
        "engine": {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "block_size": 64},
    }
)


def _trace(name: str) -> list:  # type: ignore[type-arg]
    path = TRACES / "mooncake" / name
    if not path.exists():
        pytest.skip(f"trace {path} not present")
    return load_trace(path)


@pytest.mark.parametrize("name", ["conversation_trace.jsonl", "synthetic_trace.jsonl"])
def test_kv_aware_beats_round_robin_on_mooncake(name: str) -> None:
    requests = _trace(name)
    perf = resolve(BASE)
    out = {}
    for router in ("round_robin", "kv_aware"):
        sim = Simulation(
            replace(BASE, router=router),
            requests,
            perf=perf,
        )
        out[router] = sim.run().metrics
        assert out[router].completed_requests == len(requests)
    rr, kv = out["round_robin"], out["kv_aware"]
    assert kv.prefix_cache_hit_rate > rr.prefix_cache_hit_rate
    assert kv.time_to_first_token.p50 < rr.time_to_first_token.p50


def test_fast_forward_matches_stepping_on_real_trace_with_scarce_kv() -> None:
    requests = head(_trace("conversation_trace.jsonl"), 600)
    cfg = replace(BASE, router="kv_aware", workers=2)
    perf = resolve(cfg)
    runs = []
    for ff in (True, False):
        sim = Simulation(
            cfg,
            requests,
            fast_forward=ff,
            perf=replace(perf, kv_blocks=1600),  # ~100k tokens: scarce for long prompts
        )
        runs.append(sim.run())
    assert runs[0].metrics.preemptions > 0
    assert runs[0].records.equal(runs[1].records)
