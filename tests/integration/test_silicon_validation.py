"""Closed-loop replays of real-GPU measurements (AIConfigurator's silicon_sample.csv).

Llama-3.1-8B-Instruct / h100_sxm / trtllm, aggregated: 177 runs at TP 1-8, concurrency 8-128,
ISL 1k-4k, OSL 128-512. The calibration profile (dynosim/perf/profiles/default.yaml) was fitted
on these rows (and on the Qwen3-32B h100 trtllm/sglang rows), so this checks that calibration
holds, not an independent validation. The replay here is the plain closed loop of
``silicon.replay`` (every client at once, fixed lengths, 4 requests per client, no client
model); ``dynosim validate`` replays the rows with the InferenceX client instead (see the
README's fidelity table: TPOT 6.7%, TTFT 35.0% MAPE). Bounds:
* TPOT: measured 10.3% MAPE (session 4). AIC's own kernel database is quoted at ~10% and our
  step model adds interpolation error; 12% leaves room for data updates within
  aiconfigurator-core 0.12.*.
* TTFT: measured 58% MAPE. In a closed loop that starts all clients at once, TTFT is set by how
  the benchmark's clients were started and stay (lock-step waves of prefill) and by the host
  (issue 9); we bound it at 75% and say so rather than tune a ramp to fit it.
"""

from __future__ import annotations

import itertools
import statistics

import pytest

from dynosim.validation.silicon import load_rows, replay

MODEL = ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", "trtllm")


@pytest.fixture(scope="module")
def replays() -> list:  # type: ignore[type-arg]
    rows = load_rows(*MODEL)
    assert len(rows) == 177
    return [replay(r) for r in rows]


def test_tpot_mape_within_bound(replays: list) -> None:  # type: ignore[type-arg]
    mape = statistics.mean(abs(r.tpot_error) for r in replays)
    assert mape < 0.12, f"TPOT MAPE {mape:.1%}"


def test_ttft_mape_within_bound(replays: list) -> None:  # type: ignore[type-arg]
    mape = statistics.mean(abs(r.ttft_error) for r in replays)
    assert mape < 0.75, f"TTFT MAPE {mape:.1%}"


def test_more_concurrency_raises_simulated_tpot_like_the_measurements(replays: list) -> None:  # type: ignore[type-arg]
    by_shape: dict[tuple[int, int, int], list] = {}  # type: ignore[type-arg]
    for r in replays:
        by_shape.setdefault((r.row.tp, r.row.isl, r.row.osl), []).append(r)
    agree = total = 0
    for group in by_shape.values():
        group.sort(key=lambda r: r.row.concurrency)
        for lo, hi in itertools.pairwise(group):
            if hi.row.tpot_ms > lo.row.tpot_ms * 1.1:  # a clear rise in the measurements
                total += 1
                agree += hi.tpot_ms > lo.tpot_ms
    assert total > 20
    assert agree == total
