"""Attention-DP replicas: their ranks step together, and TensorRT-LLM balances their contexts.

Hand-computed schedules (every step ``1000 + tokens`` us, or 1 ms flat), against independent
workers where the difference is the point; fast-forward equals stepping on each; the balancing
rule's closed forms equal iterating it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from dynosim import DeploymentConfig, Request, Simulation
from dynosim.engine.adp_balance import AdpBalance
from dynosim.errors import ConfigError
from dynosim.files import load_deployment
from dynosim.perf.deployment import DeploymentPerf
from dynosim.perf.linear import LinearStepTime
from tests.conftest import assert_workers_empty

TOKENS = LinearStepTime(base_us=1000.0, per_token_us=1.0, per_kv_token_us=0.0, per_seq_us=0.0)
FLAT = LinearStepTime(base_us=1000.0, per_token_us=0.0, per_kv_token_us=0.0, per_seq_us=0.0)


def _run(
    reqs: list[Request], ff: bool, timing: LinearStepTime, **data: object
) -> tuple[list[int], list[int]]:
    """(first token, finish) of each request, in us."""
    base: dict[str, object] = {"model": "x", "gpu": "h200_sxm", "router": "round_robin"}
    cfg = DeploymentConfig.from_dict(base | data)
    perf = DeploymentPerf(timing, 10_000, gpu_hour_usd=1.0)
    sim = Simulation(cfg, reqs, perf=perf, fast_forward=ff)
    rec = sim.run().records
    assert_workers_empty(sim)
    return [int(x) for x in rec.first_token_us], [int(x) for x in rec.finish_us]


@pytest.mark.parametrize("ff", [True, False])
def test_a_replica_step_lasts_as_long_as_its_slowest_rank(ff: bool) -> None:
    # A (100 tokens) and B (900) start together on ranks 0 and 1: their prefills take 1.1 and
    # 1.9 ms alone, 1.9 ms as one replica; then two decode steps of 1.001 ms each.
    reqs = [Request(id=0, arrival_s=0.0, input_tokens=100, output_tokens=3),
            Request(id=1, arrival_s=0.0, input_tokens=900, output_tokens=3)]  # fmt: skip
    assert _run(reqs, ff, TOKENS, attention_dp=2) == ([1900, 1900], [3902, 3902])
    assert _run(reqs, ff, TOKENS, workers=2) == ([1100, 1900], [3102, 3902])


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_vllm_data_parallel_ranks_of_a_dense_model_are_independent(backend: str) -> None:
    # vLLM aligns its DP ranks' forward passes for MoE models only; SGLang's and TRT-LLM's
    # attention DP gathers the ranks' tokens after attention, dense or not.
    reqs = [Request(id=0, arrival_s=0.0, input_tokens=100, output_tokens=3),
            Request(id=1, arrival_s=0.0, input_tokens=900, output_tokens=3)]  # fmt: skip
    dense = {"model": "meta-llama/Meta-Llama-3.1-8B", "backend": backend, "attention_dp": 2}
    first, _ = _run(reqs, True, TOKENS, **dense)
    assert first == ([1100, 1900] if backend == "vllm" else [1900, 1900])
    moe = dense | {"model": "Qwen/Qwen3-30B-A3B", "ep": 2}
    assert _run(reqs, True, TOKENS, **moe)[0] == [1900, 1900]


@pytest.mark.parametrize("ff", [True, False])
def test_a_rank_prefilling_stalls_the_other_ranks_decode(ff: bool) -> None:
    # A decodes on rank 0 from 1.1 ms (steps of 1.001 ms: 2.101, 3.102, ...). B (900 tokens)
    # reaches idle rank 1 at 2.5 ms and joins at the replica's next boundary, 3.102 ms: that
    # step lasts B's 1.9 ms prefill, for A too (its token at 5.002 ms); then both decode.
    reqs = [Request(id=0, arrival_s=0.0, input_tokens=100, output_tokens=10),
            Request(id=1, arrival_s=0.0025, input_tokens=900, output_tokens=2)]  # fmt: skip
    assert _run(reqs, ff, TOKENS, attention_dp=2) == ([1100, 5002], [11008, 6003])
    # alone, B starts at once (first token 2.5 + 1.9 ms) and A never waits (1.1 + 9 x 1.001)
    assert _run(reqs, ff, TOKENS, workers=2) == ([1100, 4400], [10109, 5401])


@dataclass(frozen=True, slots=True, kw_only=True)
class MoeLinear(LinearStepTime):
    """Steps of ``1000 + tokens`` us of which the experts are ``tokens / 2`` (as AIC: per rank)."""

    def moe_us(self, prefill_tokens: float, n_decode: float) -> float:
        return 0.5 * (prefill_tokens + n_decode)


MOE = MoeLinear(base_us=1000.0, per_token_us=1.0, per_kv_token_us=0.0, per_seq_us=0.0)


@pytest.mark.parametrize("ff", [True, False])
def test_a_replica_prices_its_experts_at_the_ranks_mean_tokens(ff: bool) -> None:
    # A (100 tokens) and B (900) prefill together: their own prices (1,100 and 1,900 us) hold
    # the experts of 100 and 900 tokens on every rank (50 and 450 us); the replica's experts
    # run over the mean, 500 tokens (250 us): 1,300 and 1,700 us, the step 1,700 us. Decode
    # steps carry one token on each rank: nothing moves.
    reqs = [Request(id=0, arrival_s=0.0, input_tokens=100, output_tokens=3),
            Request(id=1, arrival_s=0.0, input_tokens=900, output_tokens=3)]  # fmt: skip
    assert _run(reqs, ff, MOE, attention_dp=2) == ([1700, 1700], [3702, 3702])
    # B alone on one of two ranks: the experts of 450 tokens (225 us), not of 900 (450 us)
    alone = [Request(id=0, arrival_s=0.0, input_tokens=900, output_tokens=3)]
    assert _run(alone, ff, MOE, attention_dp=2) == ([1675], [3677])


def _balanced(timeout: int | None, batching: int | None = 0) -> dict[str, object]:
    engine: dict[str, object] = {"attention_dp_enable_balance": True}
    if timeout is not None:
        engine["attention_dp_timeout_iters"] = timeout
    if batching is not None:
        engine["attention_dp_batching_wait_iters"] = batching
    return {"backend": "trtllm", "attention_dp": 2, "engine": engine}


@pytest.mark.parametrize(
    ("timeout", "osl", "first_us"),
    [(5, 100, 6000), (60, 100, 61000), (60, 8, 9000), (None, 100, 51000), (1, 100, 4000)],
)
@pytest.mark.parametrize("ff", [True, False])
def test_trtllm_holds_a_lone_context_until_the_timeout_counter_wraps(
    timeout: int | None, osl: int, first_us: int, ff: bool
) -> None:
    # Every step takes 1 ms. A and C prefill together on ranks 0 and 1 (no rank generates
    # yet: no wait) and decode from 1 ms. Each later boundary with no context anywhere counts
    # the timeout counter up (1 at 1 ms, 2 at 2 ms, ...; back to 0 at T). B reaches rank 0 at
    # 2.5 ms; from 3 ms it is the only rank with a context: it waits, the count going on, until
    # the boundary where it reaches T (T ms): B's prefill runs then, its first token at T + 1
    # ms. TensorRT-LLM's default T is 50. With T = 1 the counter is 0 after every boundary and
    # B runs at once (4 ms). When A and C finish (8 tokens: their last at 8 ms) no rank
    # generates and B runs at once (9 ms).
    reqs = [Request(id=0, arrival_s=0.0, input_tokens=100, output_tokens=osl),
            Request(id=1, arrival_s=0.0, input_tokens=100, output_tokens=osl),
            Request(id=2, arrival_s=0.0025, input_tokens=100, output_tokens=2)]  # fmt: skip
    first, _ = _run(reqs, ff, FLAT, **_balanced(timeout))
    assert first == [1000, 1000, first_us]
    # without balancing B runs at the first boundary after it arrives
    assert _run(reqs, ff, FLAT, backend="trtllm", attention_dp=2)[0] == [1000, 1000, 4000]


@pytest.mark.parametrize(("batching", "first_us"), [(0, 4000), (3, 7000), (None, 14000)])
@pytest.mark.parametrize("ff", [True, False])
def test_trtllm_runs_contexts_once_every_rank_has_one_after_the_batching_wait(
    batching: int | None, first_us: int, ff: bool
) -> None:
    # B and D reach ranks 0 and 1 at 2.5 ms: from 3 ms every rank has a context and
    # generates, so they wait B more boundaries (the batching counter, default 10) and run
    # at the next: first tokens at 4 + B ms.
    reqs = [Request(id=0, arrival_s=0.0, input_tokens=100, output_tokens=100),
            Request(id=1, arrival_s=0.0, input_tokens=100, output_tokens=100),
            Request(id=2, arrival_s=0.0025, input_tokens=100, output_tokens=2),
            Request(id=3, arrival_s=0.0025, input_tokens=100, output_tokens=2)]  # fmt: skip
    first, _ = _run(reqs, ff, FLAT, **_balanced(60, batching))
    assert first == [1000, 1000, first_us, first_us]


def test_the_balancing_rule_in_closed_form_equals_iterating_it() -> None:
    r = random.Random(7)
    for _ in range(3000):
        t, b = r.choice([0, 1, 2, 5, 60]), r.choice([0, 1, 3, 10])
        bal = AdpBalance(timeout_iters=t, batching_wait_iters=b, max_batch=r.choice([2, 64]),
                         waiting=r.randrange(max(t, 1)), batching=r.randrange(b + 1))  # fmt: skip
        ranks = r.choice([2, 4])
        ctx = [r.choice([0, 0, 1, 3]) for _ in range(ranks)]
        gen = [r.choice([0, 1, 2, 5, 64]) for _ in range(ranks)]
        m = r.choice([1, 2, 7, 61, 500])
        stepped = AdpBalance(bal.timeout_iters, bal.batching_wait_iters, bal.max_batch,
                             bal.waiting, bal.batching)  # fmt: skip
        for _ in range(m):
            stepped.decide(ctx, gen)
        bal_copy = AdpBalance(bal.timeout_iters, bal.batching_wait_iters, bal.max_batch,
                              bal.waiting, bal.batching)  # fmt: skip
        bal.advance(ctx, gen, m)
        assert (bal.waiting, bal.batching) == (stepped.waiting, stepped.batching)
        if not bal_copy.decide(ctx, gen):  # held: the first later iteration that releases
            j = bal_copy.held_for(ctx, gen)
            assert [bal_copy.decide(ctx, gen) for _ in range(j)] == [False] * (j - 1) + [True]


def test_balancing_is_trtllm_only_and_its_counts_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"engine\.attention_dp_enable_balance: got True; "
                       r"allowed: only with backend: trtllm \(this is vllm\)"):  # fmt: skip
        DeploymentConfig.from_dict({"model": "x", "gpu": "h200_sxm", "attention_dp": 2,
                                    "engine": {"attention_dp_enable_balance": True}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"engine\.attention_dp_timeout_iters: got -1"):
        DeploymentConfig.from_dict(
            {
                "model": "x",
                "gpu": "h200_sxm",
                "backend": "trtllm",
                "engine": {"attention_dp_timeout_iters": -1},
            }
        )


def test_the_attention_dp_example_is_what_the_deepseek_recipes_ran() -> None:
    example = Path(__file__).parents[2] / "examples" / "deepseek_r1_b200_trtllm_adp.yaml"
    cfg = load_deployment(example)
    assert (cfg.backend, cfg.tp, cfg.attention_dp, cfg.ep, cfg.gpus) == ("trtllm", 1, 8, 8, 8)
    e = cfg.engine
    balance = (e.attention_dp_enable_balance, e.attention_dp_timeout_iters,
               e.attention_dp_batching_wait_iters)  # fmt: skip
    assert balance == (True, 60, 0)
