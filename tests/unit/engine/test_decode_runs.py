"""The workers' memo of decode-only step durations (dynosim.engine.decode_runs)."""

from __future__ import annotations

import numpy as np
import pytest

from dynosim.engine import decode_runs
from dynosim.perf.linear import LinearStepTime


def test_sums_are_the_stepped_durations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every KV length has its own price here (steep in the KV), so a memo that confused two
    progressions (residues of ``kv`` mod ``n``), two chunks or two batch sizes would show."""
    monkeypatch.setattr(decode_runs, "_MAX_STEPS", 20_000)  # it also starts over, repeatedly
    model = LinearStepTime(per_kv_token_us=0.37, per_seq_us=3.3)
    runs = decode_runs.DecodeRuns(model)
    rng = np.random.default_rng(7)
    for _ in range(400):
        n = int(rng.choice([1, 2, 3, 4, 5, 8, 17, 64, 257]))
        kv = int(rng.integers(0, 3000)) * n + int(rng.integers(n))
        k = int(rng.integers(1, 2500))
        sums, t = runs.sums(n, kv, k)
        expect = np.cumsum([model.step_us((), n, kv + j * n) for j in range(k)])
        assert (sums[t + 1 : t + k + 1] - sums[t]).tolist() == expect.tolist()


@pytest.mark.parametrize(("n", "steps"), [(1, 1024), (4, 1024), (5, 512), (17, 128), (300, 64)])
def test_chunk_steps(n: int, steps: int) -> None:
    assert decode_runs.chunk_steps(n) == steps
