"""Conformance suite of the StepTimeModel protocol, over every implementation."""

from __future__ import annotations

import json
import logging
import math
import warnings
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf import aic
from dynosim.perf.aic import EstimatedTimingWarning
from dynosim.perf.aic.key import _query_version
from dynosim.perf.calibration import StepCalibration
from dynosim.perf.factory import step_time_model
from dynosim.perf.overhead import NO_OVERHEAD, CalibratedStepTime
from dynosim.perf.protocol import StepTimeModel

MODEL = "meta-llama/Meta-Llama-3.1-8B"
IMPLEMENTATIONS = ["aic", "roofline"]


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh on-disk cache: AIC tables are built from the installed package, offline."""
    root = tmp_path_factory.mktemp("dynosim_cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("DYNOSIM_CACHE_DIR", str(root))
    aic.load_tables.cache_clear()
    yield root
    mp.undo()
    aic.load_tables.cache_clear()


# The contract holds for every kind of table: dense (roofline and AIC); an MoE whose experts
# AIConfigurator has no kernels for at this split (MiniMax-M2.5 at TP 8: per-tensor FP8 MoE
# timing, estimated; issue 8); an MLA MoE whose decode-only steps have their own op list
# (Kimi-K2.5: the dec_nonattn table). vLLM has no fitted kernel factors in the shipped
# profile, so these are the tables' own contract.
MODEL_CASES = {
    "roofline": {"model": MODEL, "gpu": "h100_sxm", "backend": "trtllm", "timing": "roofline"},
    "aic": {"model": MODEL, "gpu": "h100_sxm", "backend": "trtllm", "timing": "aic"},
    "aic-moe-estimated": {"model": "MiniMaxAI/MiniMax-M2.5", "gpu": "h200_sxm", "tp": 8,
                          "dtype": "fp8", "timing": "aic"},
    "aic-mla-moe": {"model": "moonshotai/Kimi-K2.5", "gpu": "b200_sxm", "tp": 8,
                    "dtype": "int4_wo", "timing": "aic"},
}  # fmt: skip
# The MoE table with the kernel factors of a fitted TRT-LLM profile (prefill above decode): a
# mixed step's decodes share its experts, so a calibrated price that gave them their own
# decode-alone time as their share fell as decodes joined (issue 9's defect).
CALIBRATED_MOE = StepCalibration(prefill=1.15, decode=0.83)


@pytest.fixture(scope="session", params=[*MODEL_CASES, "aic-moe-calibrated"])
def model(request: pytest.FixtureRequest, cache_root: Path) -> StepTimeModel:
    name = "aic-moe-estimated" if request.param == "aic-moe-calibrated" else request.param
    cfg = DeploymentConfig.from_dict(MODEL_CASES[name])
    if not name.startswith("aic-m"):
        return step_time_model(cfg)
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        mp.setenv("DYNOSIM_CACHE_DIR", str(cache_root / "moe"))  # the disk-cache tests' files
        warnings.simplefilter("ignore", EstimatedTimingWarning)  # stay the dense model's only
        if request.param != "aic-moe-calibrated":
            return step_time_model(cfg)
        inner = step_time_model(replace(cfg, framework_overhead_us=0.0))
        return CalibratedStepTime(inner, CALIBRATED_MOE, NO_OVERHEAD)


def test_positive_int(model: StepTimeModel) -> None:
    for shape in [((), 1, 1), (((1, 0),), 0, 0), (((8192, 50_000),), 200, 400_000), ((), 0, 0)]:
        d = model.step_us(*shape)
        assert isinstance(d, int)
        assert d >= 1
    run = model.decode_run_us(4, 400, 10)
    assert run.dtype == np.int64
    assert (run >= 1).all()


def test_deterministic(model: StepTimeModel) -> None:
    shape = (((512, 1000), (64, 0)), 17, 17 * 900)
    assert len({model.step_us(*shape) for _ in range(5)}) == 1
    a = model.decode_run_us(33, 33 * 700, 50)
    assert np.array_equal(a, model.decode_run_us(33, 33 * 700, 50))


def test_one_chunk_memo_prices_as_computed(model: StepTimeModel) -> None:
    """A calibrated model memoises one-chunk prefill steps: a memoised price is the computed one.

    Every shape is first priced with the memo emptied before the call, then all again, in
    another order and repeated, from the memo; chunks share contexts and contexts share
    chunks, so a memo keyed on less than the whole shape gives another price.
    """
    chunks, contexts = [1, 64, 511, 2048, 8192], [0, 512, 8191, 30_000, 200_000]
    shapes = [(c, x) for c in chunks for x in contexts]
    memo = getattr(model, "_chunk_us", None)

    def fresh(shape: tuple[int, int]) -> int:
        if memo is not None:
            memo.clear()
        return model.step_us([shape], 0, 0)

    computed = {s: fresh(s) for s in shapes}
    order = [*reversed(shapes), *shapes[::2], *shapes]
    assert [model.step_us([s], 0, 0) for s in order] == [computed[s] for s in order]
    assert [model.step_us((s,), 0, 0) for s in shapes] == [computed[s] for s in shapes]


LENGTHS = [1, 2, 3, 7, 16, 100, 513, 1024, 4000, 8192, 30_000, 200_000]


def test_monotone_in_prefill_tokens(model: StepTimeModel) -> None:
    for ctx in [0, 100, 5000]:
        times = [model.step_us(((c, ctx),), 8, 8000) for c in LENGTHS]
        assert times == sorted(times)


def test_monotone_in_context(model: StepTimeModel) -> None:
    for chunk in [1, 256, 2048]:
        times = [model.step_us(((chunk, p),), 0, 0) for p in [0, *LENGTHS]]
        assert times == sorted(times)


def test_monotone_in_more_prefill_requests(model: StepTimeModel) -> None:
    times = [model.step_us(tuple((128, 64) for _ in range(k)), 4, 4000) for k in range(1, 20)]
    assert times == sorted(times)


@pytest.mark.parametrize("kv_per_request", [1, 100, 2000, 60_000])
def test_monotone_in_decode_batch(model: StepTimeModel, kv_per_request: int) -> None:
    ns = [1, 2, 3, 5, 8, 13, 64, 100, 256, 1000, 4096]
    same_per_request = [model.step_us((), n, n * kv_per_request) for n in ns]
    assert same_per_request == sorted(same_per_request)
    mixed = [model.step_us(((256, 0),), n, n * kv_per_request) for n in ns]
    assert mixed == sorted(mixed)


@pytest.mark.parametrize("n", [1, 7, 64, 300])
def test_monotone_in_kv(model: StepTimeModel, n: int) -> None:
    times = [model.step_us((), n, n * kv) for kv in LENGTHS]
    assert times == sorted(times)
    run = model.decode_run_us(n, n, 5000)
    assert (np.diff(run) >= 0).all()


@pytest.mark.parametrize(
    ("n", "kv", "k"),
    [
        (1, 1, 300),
        (3, 10, 1000),
        (16, 16 * 1000, 2000),
        (77, 77 * 123, 500),
        (256, 256 * 4000, 300),
        (1000, 1000 * 20, 100),
        (5000, 5000 * 3000, 50),
        (2, 1 << 27, 20),
    ],
)
def test_decode_run_equals_stepping(model: StepTimeModel, n: int, kv: int, k: int) -> None:
    run = model.decode_run_us(n, kv, k)
    assert run.shape == (k,)
    stepped = [model.step_us((), n, kv + j * n) for j in range(k)]
    assert run.tolist() == stepped


def test_decode_run_equals_stepping_random(model: StepTimeModel) -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 3000))
        kv = n * int(rng.integers(1, 50_000))
        k = int(rng.integers(1, 40))
        assert model.decode_run_us(n, kv, k).tolist() == [
            model.step_us((), n, kv + j * n) for j in range(k)
        ]


def test_decode_run_zero_steps(model: StepTimeModel) -> None:
    assert model.decode_run_us(8, 800, 0).shape == (0,)


@pytest.mark.parametrize("timing", IMPLEMENTATIONS)
def test_unknown_model_is_config_error(timing: str) -> None:
    cfg = DeploymentConfig(model="nope/nope", gpu="h100_sxm", timing=timing)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="model"):
        step_time_model(cfg)


@pytest.mark.parametrize("timing", IMPLEMENTATIONS)
def test_fp8_on_a100_is_config_error(timing: str) -> None:
    cfg = DeploymentConfig(model=MODEL, gpu="a100_sxm", dtype="fp8", timing=timing)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dtype"):
        step_time_model(cfg)


# --- AIC specifics -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def aic_pair(cache_root: Path) -> tuple[StepTimeModel, object]:
    cfg = DeploymentConfig(
        model=MODEL, gpu="h100_sxm", backend="trtllm", timing="aic", framework_overhead_us=0.0
    )
    from aiconfigurator_core.sdk.engine import EngineHandle

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    handle = EngineHandle.compile(MODEL, "h100_sxm", "trtllm", tp_size=1)
    return step_time_model(cfg), handle


@pytest.mark.parametrize("isl", [128, 1024, 3000, 8192])
def test_aic_prefill_matches_aiconfigurator(
    aic_pair: tuple[StepTimeModel, object], isl: int
) -> None:
    model, handle = aic_pair
    ref_us = handle.predict_prefill_latency(1, isl, 0) * 1000  # type: ignore[attr-defined]
    assert model.step_us(((isl, 0),), 0, 0) == pytest.approx(ref_us, rel=0.05)


def test_aic_prefill_with_prefix(aic_pair: tuple[StepTimeModel, object]) -> None:
    model, handle = aic_pair
    ref_us = handle.predict_prefill_latency(1, 2048, 1024) * 1000  # type: ignore[attr-defined]
    assert model.step_us(((1024, 1024),), 0, 0) == pytest.approx(ref_us, rel=0.1)


@pytest.mark.parametrize(("batch", "kv"), [(1, 128), (8, 1024), (64, 2048), (256, 1000)])
def test_aic_decode_matches_aiconfigurator(
    aic_pair: tuple[StepTimeModel, object], batch: int, kv: int
) -> None:
    model, handle = aic_pair
    ref_us = handle.predict_decode_latency(batch, kv) * 1000  # type: ignore[attr-defined]
    assert model.step_us((), batch, batch * kv) == pytest.approx(ref_us, rel=0.1)


def test_aic_disk_cache(cache_root: Path) -> None:
    cfg = DeploymentConfig(model=MODEL, gpu="h100_sxm", backend="trtllm")
    key = aic.resolve_key(cfg)
    aic.aic_tables(key)
    path = cache_root / "aic" / key.filename()
    assert path.is_file()
    assert aic.aic_version() in path.name
    assert not list(path.parent.glob("*.tmp"))
    aic.load_tables.cache_clear()
    loaded = aic.aic_tables(key)  # from disk this time
    with np.load(path) as data:
        assert np.array_equal(loaded["decode_us"], data["decode_us"])


def test_aic_query_version_disk_cache(cache_root: Path) -> None:
    _query_version.cache_clear()
    cfg = DeploymentConfig(model=MODEL, gpu="h100_sxm", backend="trtllm")
    key = aic.resolve_key(cfg)
    path = cache_root / "aic" / f"query_versions_aic{aic.aic_version()}.json"
    assert json.loads(path.read_text()) == {"h100_sxm/trtllm": key.backend_version}
    _query_version.cache_clear()
    path.write_text(json.dumps({"h100_sxm/trtllm": "from-disk"}))
    assert aic.resolve_key(cfg).backend_version == "from-disk"  # read, not resolved again
    path.write_text("not json")
    _query_version.cache_clear()
    assert aic.resolve_key(cfg) == key  # an unreadable cache file is rebuilt
    _query_version.cache_clear()


def test_overhead_override_adds_constant(cache_root: Path) -> None:
    base = DeploymentConfig(
        model=MODEL, gpu="h100_sxm", backend="trtllm", framework_overhead_us=0.0
    )
    for timing in IMPLEMENTATIONS:
        cfg = replace(base, timing=timing)
        a = step_time_model(cfg)
        b = step_time_model(replace(cfg, framework_overhead_us=1000.0))
        assert b.step_us((), 4, 400) - a.step_us((), 4, 400) in (999, 1000, 1001)


@pytest.mark.parametrize(("n", "s"), [(8, 2048), (16, 2048), (32, 1024), (64, 1024)])
def test_aic_decode_attention_is_aiconfigurators_at_that_batch_and_length(
    cache_root: Path, n: int, s: int
) -> None:
    """n requests of s tokens each are priced at AIConfigurator's (batch n, s), nothing else.

    Qwen3-32B on 4 H100s (TRT-LLM): AIConfigurator measures one request of n*s tokens as
    slower than n requests of s; tables by total KV with a monotone envelope along the batch
    carried that single request's time to the whole batch (1.2-1.5x here, 26x for Qwen3.5 on
    B200). The growth of the decode step from s to 4 s, everything but attention cancelling,
    equals the growth of AIConfigurator's own attention op (at shapes where AIConfigurator's
    data is monotone in the batch, so that the tables' envelope is its data).
    """
    from dynosim.perf.aic.build import _compile, _op_indices

    cfg = DeploymentConfig(model="Qwen/Qwen3-32B", gpu="h100_sxm", backend="trtllm", tp=4,
                           timing="aic", framework_overhead_us=0.0)  # fmt: skip
    model = step_time_model(cfg)
    handle, _ = _compile(aic.resolve_key(cfg))  # the engine the tables were built from
    _, attn, _ = _op_indices(lambda idx: handle.evaluate_generation_ops(idx, batch_size=1, s=16))

    def aic_attention_us(length: int) -> float:
        return 1000 * sum(v[1] for v in handle.evaluate_generation_ops(attn, batch_size=n,
                                                                        s=length))  # fmt: skip

    growth = model.step_us((), n, 4 * n * s) - model.step_us((), n, n * s)
    assert growth == pytest.approx(aic_attention_us(4 * s) - aic_attention_us(s), rel=0.02, abs=2)


def test_decode_runs_memo_prices_as_stepping(
    model: StepTimeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers' memo of decode runs (chunks of running sums) gives the stepped durations.

    Runs start anywhere in a chunk, cross one or several chunks, and revisit shapes priced
    before (by another run, another residue of ``kv`` mod ``n``); the memo also starts over
    (a small cap) without changing a price.
    """
    from dynosim.engine import decode_runs

    monkeypatch.setattr(decode_runs, "_MAX_STEPS", 5000)
    runs = decode_runs.DecodeRuns(model)
    rng = np.random.default_rng(1)
    cases = [(1, 5, 1030), (1, 1000, 30), (2, 2047 * 2 + 1, 2), (3, 9, 2500), (70, 70 * 63, 3)]
    for _ in range(60):
        n = int(rng.choice([1, 2, 3, 5, 9, 40, 300]))
        cases.append((n, int(rng.integers(1, 20_000)) * n + int(rng.integers(n)),
                      int(rng.integers(1, 1500))))  # fmt: skip
    for n, kv, k in cases:
        sums, t = runs.sums(n, kv, k)
        got = (sums[t + 1 : t + k + 1] - sums[t]).tolist()
        assert got == np.cumsum([model.step_us((), n, kv + j * n) for j in range(k)]).tolist()


def test_step_parts_are_the_three_prices(model: StepTimeModel) -> None:
    """AicStepTime.step_parts (one pass) gives what pricing the mixed step, its decodes alone
    and its chunks alone gives (CalibratedStepTime relies on it for every mixed step)."""
    inner = getattr(model, "inner", model)
    parts = getattr(inner, "step_parts", None)
    if parts is None:
        pytest.skip("the model prices mixed steps without step_parts")
    rng = np.random.default_rng(2)
    for _ in range(300):
        prefill = [(int(rng.choice([1, 7, 512, 3000, 8192])), int(rng.integers(0, 100_000)))
                   for _ in range(int(rng.integers(1, 4)))]  # fmt: skip
        n = int(rng.integers(1, 300))
        kv = n * int(rng.integers(1, 20_000)) + int(rng.integers(n))
        assert parts(prefill, n, kv) == (
            inner.step_us(prefill, n, kv),
            inner.step_us((), n, kv),
            inner.step_us(prefill, 0, 0),
        )


def _lerp_ref(grid: list[float], vals: list[float], x: float) -> float:
    """A lerp on ``grid`` as the step-time models spell it out (differences taken per call)."""
    i = min(max(bisect_right(grid, x) - 1, 0), len(grid) - 2)
    w = (x - grid[i]) / (grid[i + 1] - grid[i])
    return vals[i] + w * (vals[i + 1] - vals[i])


def test_inline_lerps_are_the_reference_lerps(model: StepTimeModel) -> None:
    """AicStepTime's inline lerps (segment widths taken once) give the reference's bits.

    A step's chunks (``_chunks_us``: tokens, ``F + sum(p - F)`` with ``p`` the bilinear lerp of
    the prefill table) and its attention-free part (``_const_us``), to the last bit, on and off
    the grids and beyond their ends.
    """
    inner = getattr(model, "inner", model)
    if not hasattr(inner, "_chunks_us"):
        pytest.skip("not the AIConfigurator model")
    tok, nonattn, chunk_g, ctx_g, rows = (inner._tok, inner._nonattn, inner._chunk, inner._ctx,
                                          inner._prefill)  # fmt: skip
    floor = rows[0][0]
    rng = np.random.default_rng(3)
    values = [*LENGTHS, *chunk_g[:3], *ctx_g[:3], int(chunk_g[-1]) + 77, int(ctx_g[-1]) * 3]
    for _ in range(400):
        prefill = [(int(rng.choice(values)) if rng.random() < 0.5 else int(rng.integers(0, 9000)),
                    int(rng.choice(values)) if rng.random() < 0.5 else int(rng.integers(0, 10**6)))
                   for _ in range(int(rng.integers(1, 5)))]  # fmt: skip
        tokens, attn = 0, floor
        for c, x in prefill:
            tokens += c
            cx = float(max(c, 1))
            i = min(max(bisect_right(chunk_g, cx) - 1, 0), len(chunk_g) - 2)
            wc = (cx - chunk_g[i]) / (chunk_g[i + 1] - chunk_g[i])
            a = _lerp_ref(ctx_g, rows[i], float(max(x, 0)))
            b = _lerp_ref(ctx_g, rows[i + 1], float(max(x, 0)))
            attn += (a + wc * (b - a)) - floor
        assert inner._chunks_us(prefill) == (tokens, attn)
        m = len(prefill)
        inner._const_us(1, m)  # fills the per-request cache
        logits, overhead = inner._per_r[m]
        const = _lerp_ref(tok, nonattn, float(max(tokens, 1))) + logits + overhead
        assert inner._const_us(max(tokens, 1), m) == const


def test_prefill_only_calibrated_price_is_the_mixed_formula(model: StepTimeModel) -> None:
    """CalibratedStepTime prices a step of chunks only as its mixed-step formula with no decode
    share (``decode = 0``), memo emptied before each call."""
    if not isinstance(model, CalibratedStepTime):
        pytest.skip("no calibration")
    rng = np.random.default_rng(4)
    cal, own, add, floor = model.cal, model.inner_overhead, model.overhead, model.floor
    for _ in range(300):
        prefill = [(int(rng.choice([1, 7, 512, 3000, 8192])), int(rng.integers(0, 100_000)))
                   for _ in range(int(rng.integers(1, 4)))]  # fmt: skip
        tokens = sum(c for c, _ in prefill)
        kernel = float(model.inner.step_us(prefill, 0, 0)) - own.us(len(prefill))
        decode = 0.0
        priced = cal.decode * decode + cal.prefill * (kernel - decode)
        if floor is not None:
            priced = max(priced, float(floor.step_us(prefill, 0, 0)))
        want = max(1, math.floor(priced + add.us(len(prefill), tokens) + 0.5))
        model._chunk_us.clear()
        assert model.step_us(prefill, 0, 0) == want
