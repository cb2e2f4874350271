"""Speculative decoding: verify steps per request, their cost, and the equivalences it keeps.

k = 0 is plain decoding bit for bit; acceptance 0 yields one token per step (the same schedule
as plain decoding, every step dearer by the verify and draft cost); acceptance 1 with k draft
tokens yields k + 1 tokens per step; sampled acceptance is seeded and averages the expected
tokens per step; fast-forward still equals stepping.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from dynosim import DeploymentConfig, Request, Simulation
from dynosim.config import SpeculativeConfig
from dynosim.config.speculative import MTP_ACCEPTANCE, MTP_ACCEPTANCE_LENGTHS
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from dynosim.perf.speculative import (
    SpeculativeStepTime,
    expected_tokens_per_step,
    extra_blocks,
    verify_steps,
)
from dynosim.simulation import SimResult
from tests.conftest import assert_workers_empty, make_requests
from tests.integration.test_fast_forward_fuzz import _case, _check


def _spec(**kw: object) -> SpeculativeConfig:
    return SpeculativeConfig(**kw)  # type: ignore[arg-type]


def _run(
    cfg: DeploymentConfig, reqs: list[Request], k: int = 0, fraction: float = 0.05
) -> tuple[SimResult, Simulation]:
    timing = LinearStepTime()
    if cfg.speculative is not None and cfg.speculative.num_speculative_tokens:
        timing = SpeculativeStepTime(timing, k, fraction)  # type: ignore[assignment]
    perf = DeploymentPerf(timing, 50_000, gpu_hour_usd=1.0, kv_bytes_per_token=4096)
    sim = Simulation(cfg, reqs, perf=perf)
    res = sim.run()
    assert_workers_empty(sim)
    return res, sim


def _cfg(spec: SpeculativeConfig | None) -> DeploymentConfig:
    base = DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "workers": 2})
    return replace(base, speculative=spec)


REQS = make_requests(120, rate_rps=30, seed=7, input_range=(100, 2000), output_range=(2, 400))


def test_expected_tokens_per_step() -> None:
    assert expected_tokens_per_step(_spec(num_speculative_tokens=2, acceptance=[0.9, 0.5])) == (
        pytest.approx(1 + 0.9 + 0.9 * 0.5)
    )
    assert expected_tokens_per_step(_spec(num_speculative_tokens=3, acceptance=1.0)) == 4
    assert expected_tokens_per_step(_spec(num_speculative_tokens=3, acceptance=0.0)) == 1


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_mtp_default_yields_the_published_acceptance_lengths(k: int) -> None:
    """TensorRT-LLM's DeepSeek-R1 on B200, autoregressive MTP with 1-5 draft tokens (tech blog
    1): 1.92, 2.58, 2.82, 2.99, 3.01 tokens a verify step; the default rates give those."""
    spec = SpeculativeConfig(method="mtp", num_speculative_tokens=k)
    assert expected_tokens_per_step(spec) == pytest.approx(MTP_ACCEPTANCE_LENGTHS[k - 1], abs=2e-4)
    assert spec.acceptance == MTP_ACCEPTANCE[:k]


def test_zero_speculative_tokens_is_plain_decoding() -> None:
    plain, _ = _run(_cfg(None), REQS)
    zero, _ = _run(_cfg(_spec(num_speculative_tokens=0)), REQS)
    assert zero.records.equal(plain.records)
    assert zero.steps == plain.steps


def test_acceptance_zero_is_plain_decoding_with_a_dearer_step() -> None:
    # one request at a time (under load the dearer steps would batch arrivals differently)
    one = make_requests(40, seed=7, input_range=(100, 2000), output_range=(2, 400), closed_loop=1)
    plain, _ = _run(_cfg(None), one)
    spec = _spec(num_speculative_tokens=2, acceptance=0.0)
    slow, _ = _run(_cfg(spec), one, k=2)
    assert slow.steps == plain.steps  # one token per step, the same schedule
    assert np.array_equal(slow.records.output_tokens, plain.records.output_tokens)
    assert slow.metrics.inter_token_latency.avg > plain.metrics.inter_token_latency.avg
    assert slow.metrics.completed_requests == plain.metrics.completed_requests == len(one)


@pytest.mark.parametrize("k", [1, 3])
def test_acceptance_one_yields_k_plus_one_tokens_per_step(k: int) -> None:
    out = 401
    req = [Request(id=0, arrival_s=0.0, input_tokens=300, output_tokens=out, block_hashes=(1,))]
    res, sim = _run(_cfg(_spec(num_speculative_tokens=k, acceptance=1.0)), req, k=k)
    decode_steps = -(-(out - 1) // (k + 1))
    assert sum(w.steps for w in sim.workers) == 1 + decode_steps  # one prefill step
    assert res.metrics.completed_requests == 1
    # the KV held at the end is that of the whole output
    ex = extra_blocks(np.array([300]), np.array([out]), np.array([1 + decode_steps]), 64)
    assert ex[0] == -(-(300 + out - 1) // 64) - -(-(300 + decode_steps) // 64)


def test_speculation_speeds_up_decoding_when_drafts_are_accepted() -> None:
    plain, _ = _run(_cfg(None), REQS)
    fast, _ = _run(_cfg(_spec(num_speculative_tokens=3, acceptance=0.8)), REQS, k=3)
    assert fast.metrics.inter_token_latency.avg < plain.metrics.inter_token_latency.avg
    assert fast.steps < plain.steps


def test_sampled_acceptance_is_seeded_and_averages_the_expected_rate() -> None:
    spec = _spec(num_speculative_tokens=3, acceptance=[0.9, 0.7, 0.5], sampling="sampled")
    outs = np.full(400, 801, dtype=np.int64)
    a = verify_steps(outs, spec, seed=1)
    assert np.array_equal(a, verify_steps(outs, spec, seed=1))
    assert not np.array_equal(a, verify_steps(outs, spec, seed=2))
    tokens_per_step = 800 / (a - 1)
    assert tokens_per_step.mean() == pytest.approx(expected_tokens_per_step(spec), rel=0.03)
    assert tokens_per_step.min() >= 1
    assert tokens_per_step.max() <= 4
    # the expected mode gives every request the mean
    e = verify_steps(outs, replace(spec, sampling="expected"), seed=1)
    assert np.all(e == 1 + np.ceil(800 / expected_tokens_per_step(spec)))


def test_verify_step_keeps_the_step_time_protocol() -> None:
    model = SpeculativeStepTime(LinearStepTime(), 3, 0.07)
    for n, kv in ((1, 10), (7, 5000), (64, 100_000)):
        run = model.decode_run_us(n, kv, 30)
        assert [int(x) for x in run] == [model.step_us((), n, kv + j * n) for j in range(30)]
    assert model.step_us([(100, 0)], 0, 0) == LinearStepTime().step_us([(100, 0)], 0, 0)
    assert model.step_us((), 8, 4000) > LinearStepTime().step_us((), 8, 4000)


@pytest.mark.parametrize("start", [0, 30])
def test_fast_forward_equals_stepping_with_speculation(start: int) -> None:
    for n in range(start, start + 30):
        cfg, reqs, kv = _case(n)
        r = random.Random(70_000 + n)
        k = r.choice([1, 2, 4])
        spec = _spec(
            num_speculative_tokens=k, acceptance=r.choice([0.0, 0.6, 1.0]),
            sampling=r.choice(["expected", "sampled"]),
        )  # fmt: skip
        _check(replace(cfg, speculative=spec), reqs, kv)


def test_bad_speculative_sections_are_one_line_errors() -> None:
    from dynosim.errors import ConfigError

    for bad, field in (
        ({"method": "eagle"}, "speculative.acceptance"),
        ({"num_speculative_tokens": 2, "acceptance": [0.5]}, "speculative.acceptance"),
        ({"acceptance": 1.5}, "speculative.acceptance"),
        ({"method": "draft", "acceptance": 0.5}, "speculative.draft_model"),
        ({"num_speculative_tokens": 17}, "speculative.num_speculative_tokens"),
        ({"sampling": "max"}, "speculative.sampling"),
    ):
        with pytest.raises(ConfigError) as err:
            DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "speculative": bad})
        assert err.value.field == field
        assert "\n" not in str(err.value)
