"""AIConfigurator's tables are made monotone by their lower envelope (an isolated slow point
is a delayed measurement, not a cost every larger step pays)."""

from __future__ import annotations

import numpy as np
import pytest

from dynosim.config import DeploymentConfig
from dynosim.perf import aic
from dynosim.perf.aic.build import _compile, _monotone, _op_indices


def test_an_isolated_slow_point_does_not_reach_larger_steps() -> None:
    raw = np.array([10.0, 9.0, 20.0, 9.5, 12.0, 11.0, 15.0])
    assert _monotone(raw).tolist() == [9.0, 9.0, 9.5, 9.5, 11.0, 11.0, 15.0]


def test_a_monotone_table_is_left_as_it_is() -> None:
    raw = np.cumsum(np.arange(1.0, 13.0)).reshape(3, 4)
    assert np.array_equal(_monotone(raw), raw)


def test_each_point_is_the_least_time_at_or_above_it_on_every_axis() -> None:
    """The greatest monotone table below the raw one: each point is the minimum over its
    upper orthant (brute force), on a random table of three axes."""
    raw = np.random.default_rng(7).lognormal(size=(5, 6, 4))
    low = _monotone(raw)
    for i, j, k in np.ndindex(raw.shape):
        assert low[i, j, k] == raw[i:, j:, k:].min()
    for axis in range(3):
        assert (np.diff(low, axis=axis) >= 0).all()


@pytest.mark.filterwarnings("ignore")
def test_llama_70b_fp8_on_b200_vllm_is_priced_from_its_fast_8_token_point() -> None:
    """AIConfigurator's vLLM FP8 GEMMs on B200 are slower at 1 token than at 8 (14.7 ms against
    18.2 ms for the step's other ops): the tabled 1-token step costs what 8 tokens cost."""
    config = DeploymentConfig(
        model="meta-llama/Llama-3.1-70B", gpu="b200_sxm", backend="vllm", dtype="fp8", tp=1
    )
    key = aic.resolve_key(config)
    h, _ = _compile(key)

    def other_ops_us(tokens: int) -> float:
        ops, _, _ = _op_indices(lambda idx: h.evaluate_context_ops(idx, batch_size=1, s=16))
        values = h.evaluate_context_ops(ops, batch_size=1, s=tokens, x=tokens)
        return 1000.0 * float(sum(v[1] for v in values))

    one, eight = other_ops_us(1), other_ops_us(8)
    assert one > 1.2 * eight  # the measurement this is about (else the test proves nothing)
    tables = aic.aic_tables(key)
    grid = tables["tok_grid"].tolist()
    at_one = tables["nonattn_us"][grid.index(1.0)]
    assert at_one <= eight
    assert at_one == pytest.approx(tables["nonattn_us"][grid.index(8.0)])
