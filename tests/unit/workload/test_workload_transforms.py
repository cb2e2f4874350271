"""Transforms renumber ids 0..n-1 and remap after_id consistently."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynosim.errors import ConfigError
from dynosim.types import Request
from dynosim.workload import head, sample, select, speedup, time_slice


def _chain(n: int = 8) -> list[Request]:
    """Two interleaved chains: even ids follow id-2, odd ids are independent; arrivals 0..n-1."""
    return [
        Request(
            id=i,
            arrival_s=float(i),
            input_tokens=10 + i,
            output_tokens=1,
            after_id=i - 2 if i >= 2 and i % 2 == 0 else None,
            delay_s=0.5 if i >= 2 and i % 2 == 0 else 0.0,
        )
        for i in range(n)
    ]


def _assert_valid(requests: list[Request]) -> None:
    for i, r in enumerate(requests):
        assert r.id == i
        assert r.after_id is None or 0 <= r.after_id < i


def test_speedup_divides_arrivals_and_delays() -> None:
    fast = speedup(_chain(), 2.0)
    assert [r.arrival_s for r in fast] == [i / 2 for i in range(8)]
    assert fast[4].delay_s == 0.25
    assert [r.after_id for r in fast] == [r.after_id for r in _chain()]


@pytest.mark.parametrize("factor", [0, -1.0, float("inf"), float("nan"), True])
def test_speedup_rejects_bad_factor(factor: float) -> None:
    with pytest.raises(ConfigError) as info:
        speedup(_chain(), factor)
    assert info.value.field == "speedup"


def test_head_keeps_prefix() -> None:
    kept = head(_chain(), 5)
    assert [r.input_tokens for r in kept] == [10, 11, 12, 13, 14]
    assert [r.after_id for r in kept] == [None, None, 0, None, 2]
    assert head(_chain(), 100) == _chain()
    assert head(_chain(), 0) == []
    with pytest.raises(ConfigError):
        head(_chain(), -1)


def test_select_follows_to_nearest_kept_ancestor() -> None:
    kept = select(_chain(), [1, 2, 6, 7])
    _assert_valid(kept)
    # 6 followed 4 which followed 2: now follows new id of 2 (=1), keeping its own delay
    assert [r.input_tokens for r in kept] == [11, 12, 16, 17]
    assert [r.after_id for r in kept] == [None, None, 1, None]
    assert kept[2].delay_s == 0.5
    # 4 with no kept ancestor becomes independent, with no delay
    alone = select(_chain(), [3, 4])
    assert [(r.after_id, r.delay_s) for r in alone] == [(None, 0.0), (None, 0.0)]


def test_time_slice_shifts_and_renumbers() -> None:
    window = time_slice(_chain(), 3.0, 6.0)
    assert [r.input_tokens for r in window] == [13, 14, 15]
    assert [r.arrival_s for r in window] == [0.0, 1.0, 2.0]
    assert [r.after_id for r in window] == [None, None, None]
    with pytest.raises(ConfigError):
        time_slice(_chain(), 5.0, 5.0)
    with pytest.raises(ConfigError):
        time_slice(_chain(), -1.0, 5.0)


def test_sample_is_seeded_and_sized() -> None:
    requests = _chain(100)
    a = sample(requests, 0.3, np.random.default_rng(1))
    assert len(a) == 30
    _assert_valid(a)
    assert a == sample(requests, 0.3, np.random.default_rng(1))
    assert [r.arrival_s for r in a] == sorted(r.arrival_s for r in a)
    assert sample(requests, 1.0, np.random.default_rng(2)) == requests
    with pytest.raises(ConfigError):
        sample(requests, 0.0, np.random.default_rng(1))


@st.composite
def _requests(draw: st.DrawFn) -> list[Request]:
    n = draw(st.integers(0, 40))
    out = []
    for i in range(n):
        after = draw(st.none() | st.integers(0, i - 1)) if i else None
        out.append(
            Request(
                id=i,
                arrival_s=draw(st.floats(0, 100)),
                input_tokens=i + 1,  # remembers the original id
                output_tokens=1,
                after_id=after,
                delay_s=1.0 if after is not None else 0.0,
            )
        )
    return out


@settings(max_examples=150, deadline=None)
@given(
    requests=_requests(),
    choice=st.sampled_from(["head", "sample", "slice", "speedup"]),
    x=st.floats(0.01, 1.0),
    seed=st.integers(0, 2**16),
)
def test_transforms_keep_ids_contiguous_and_after_ids_backward(
    requests: list[Request], choice: str, x: float, seed: int
) -> None:
    if choice == "head":
        out = head(requests, int(x * len(requests)))
    elif choice == "sample":
        out = sample(requests, x, np.random.default_rng(seed))
    elif choice == "slice":
        out = time_slice(requests, 100 * x / 2, 100 * x)
    else:
        out = speedup(requests, x * 10)
    _assert_valid(out)
    # each kept request follows its nearest kept ancestor in the original, if any
    kept = {r.input_tokens - 1: r.id for r in out}
    for r in out:
        ancestor = requests[r.input_tokens - 1].after_id
        while ancestor is not None and ancestor not in kept:
            ancestor = requests[ancestor].after_id
        assert r.after_id == (kept[ancestor] if ancestor is not None else None)
        assert (r.after_id is None) == (r.delay_s == 0.0)
