"""Shapes AIConfigurator has no measurements for: estimated (HYBRID mode) and said so, or refused.

Also the backend- and GPU-specific MoE format of MXFP4 experts, and the silicon rows whose
attention-DP column is blank.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError
from dynosim.perf import aic
from dynosim.perf.aic import AicStepTime, EstimatedTimingWarning, check_key, quant_modes
from dynosim.perf.aic.build import _compile, _moe_as_expert_parallel
from dynosim.perf.aic.cache import _build_or_error
from dynosim.perf.aic.ops import probe_ops
from dynosim.perf.memory import check_feasible
from dynosim.validation.silicon import parse_row


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty table cache, and no tables remembered in memory."""
    monkeypatch.setenv("DYNOSIM_CACHE_DIR", str(tmp_path))
    caches = (aic.load_tables, _build_or_error, aic.check_key)
    for c in caches:
        c.cache_clear()
    yield tmp_path
    for c in caches:
        c.cache_clear()


def gpt_oss(tp: int, mode: str = "hybrid") -> DeploymentConfig:
    # TensorRT-LLM with --ep_size 1 splits every expert over the tp GPUs (moe_tp = tp); the
    # shipped data has gpt-oss's MoE at moe_tp 1 only (expert parallelism up to 128).
    return DeploymentConfig.from_dict({
        "model": "openai/gpt-oss-120b", "gpu": "b200_sxm", "backend": "trtllm", "tp": tp,
        "dtype": "mxfp4", "aic_database_mode": mode,
    })  # fmt: skip


def test_missing_moe_data_is_estimated_with_a_warning_and_refused_in_silicon_mode(
    fresh_cache: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"lacks data.*MoE data missing.*moe_tp_size: 2"):
        AicStepTime.from_config(gpt_oss(2, "silicon"))
    assert not list(fresh_cache.rglob("*.npz"))  # nothing half-built is cached
    with pytest.warns(EstimatedTimingWarning, match=r"tp=2 .*moe_tp=2.*estimated.*HYBRID"):
        model = AicStepTime.from_config(gpt_oss(2))
    one, many = model.step_us([], 8, 8 * 1024), model.step_us([], 64, 64 * 1024)
    assert 0 < one < many  # a real, monotone step time
    # The estimate is remembered on disk: a later silicon-mode run still refuses it.
    aic.load_tables.cache_clear()
    with pytest.raises(ConfigError, match="MoE data missing"):
        AicStepTime.from_config(gpt_oss(2, "silicon"))
    # A fully measured shape is the same in both modes and warns nothing.
    with warnings.catch_warnings():
        warnings.simplefilter("error", EstimatedTimingWarning)
        measured = AicStepTime.from_config(gpt_oss(1))
        strict = AicStepTime.from_config(gpt_oss(1, "silicon"))
    assert measured.step_us([(512, 0)], 32, 32 * 900) == strict.step_us([(512, 0)], 32, 32 * 900)
    assert aic.load_tables(aic.resolve_key(gpt_oss(1)))[1] == ""


def test_block_fp8_experts_that_do_not_split_into_blocks_use_per_tensor_fp8_timing() -> None:
    """MiniMax-M2.5 at TP 8: 1536 / 8 = 192 expert columns per GPU, not a multiple of 128."""
    c = DeploymentConfig(model="MiniMaxAI/MiniMax-M2.5", gpu="h200_sxm", tp=8, dtype="fp8")
    check_key(aic.resolve_key(c))  # runs (estimated)
    with pytest.raises(ConfigError, match="weight_block_size"):
        check_key(aic.resolve_key(DeploymentConfig.from_dict({
            **c.to_dict(), "aic_database_mode": "silicon"
        })))  # fmt: skip
    with pytest.raises(ConfigError, match="weight_block_size"):  # block FP8 asked for explicitly
        check_key(
            aic.resolve_key(DeploymentConfig.from_dict({**c.to_dict(), "dtype": "fp8_block"}))
        )


def test_trtllm_runs_mxfp4_experts_with_mxfp8_activations_on_blackwell_only() -> None:
    def moe(gpu: str, backend: str) -> str | None:
        c = DeploymentConfig(
            model="openai/gpt-oss-120b", gpu=gpu, backend=backend, dtype="mxfp4"
        )  # fmt: skip
        return quant_modes(aic.resolve_key(c))[1]

    assert moe("b200_sxm", "trtllm") == moe("gb200", "trtllm") == "w4a8_mxfp4_mxfp8"
    assert moe("h200_sxm", "trtllm") == "w4a16_mxfp4"  # Hopper: the TRITON MoE backend
    assert moe("b200_sxm", "vllm") == "w4a16_mxfp4"
    blackwell = aic.resolve_key(gpt_oss(1))
    assert blackwell.filename().count("_moe-w4a8_mxfp4_mxfp8") == 1  # not the old tables
    hopper = aic.resolve_key(DeploymentConfig(
        model="openai/gpt-oss-120b", gpu="h200_sxm", backend="trtllm", dtype="mxfp4"
    ))  # fmt: skip
    assert "_moe-" not in hopper.filename()


def test_vllm_mxfp8_activations_time_the_experts_with_the_trtllm_gen_kernel(
    fresh_cache: Path,
) -> None:
    """``moe_activation: mxfp8`` on vLLM (``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``): every op
    is vLLM's but the routed experts, which are TensorRT-LLM's measured MXFP4 x MXFP8 kernel.
    So the step's non-attention time moves by exactly the two kernels' difference."""

    def cfg(backend: str, act: str | None) -> DeploymentConfig:
        return DeploymentConfig(
            model="openai/gpt-oss-120b", gpu="b200_sxm", backend=backend, dtype="mxfp4",
            moe_activation=act,  # type: ignore[arg-type]
        )  # fmt: skip

    default, mxfp8 = aic.resolve_key(cfg("vllm", None)), aic.resolve_key(cfg("vllm", "mxfp8"))
    assert quant_modes(default)[1] == "w4a16_mxfp4"  # vLLM's default SM100 kernel: BF16 in
    assert quant_modes(mxfp8)[1] == "w4a8_mxfp4_mxfp8"
    assert default.filename() != mxfp8.filename()
    assert aic.resolve_key(cfg("vllm", "bf16")).filename() == default.filename()
    trt, _ = _compile(aic.resolve_key(cfg("trtllm", None)))
    own, _ = _compile(default)
    mixed, note = _compile(mxfp8)
    assert note == ""  # measured kernels: not an estimate

    def ops(h: Any, phase: str, n: int) -> list[tuple[str, float]]:
        kw = {"batch_size": 1, "s": n, "x": n} if phase == "context" else {"batch_size": n, "s": 1}
        evaluate = getattr(h, f"evaluate_{phase}_ops")
        return [(str(o[0]), float(o[1])) for o in probe_ops(lambda i: evaluate(i, **kw))]

    for phase, n in (("context", 256), ("context", 8192), ("generation", 16)):
        got, vllm, theirs = ops(mixed, phase, n), ops(own, phase, n), ops(trt, phase, n)
        experts = [i for i, (name, _) in enumerate(got) if name.endswith("_moe")]
        assert len(experts) == 1
        for i, op in enumerate(got):
            assert op == (theirs[i] if i in experts else vllm[i])
        assert got[experts[0]][1] < vllm[experts[0]][1]  # MXFP8 activations: the faster kernel
    assert aic.aic_tables(mxfp8)["nonattn_us"][-1] < aic.aic_tables(default)["nonattn_us"][-1]


def test_vllm_fused_allreduce_is_timed_as_trtllms_all_reduce() -> None:
    """``engine.allreduce_fusion`` (vLLM's ``fuse_allreduce_rms`` pass: FlashInfer's
    TensorRT-LLM all-reduce fused with the RMSNorm): every all-reduce op of the step is
    TensorRT-LLM's, every other op vLLM's; a TP-8 Llama-3.1-70B B200 decode step of 16
    requests loses 2.9 ms (AIConfigurator: 2 x 2.06 ms of custom all-reduce, 2 x 0.63 fused)."""

    def cfg(backend: str, fused: bool | None) -> DeploymentConfig:
        engine = {"allreduce_fusion": fused} if fused is not None else {}
        return DeploymentConfig.from_dict({
            "model": "meta-llama/Llama-3.1-70B", "gpu": "b200_sxm", "backend": backend,
            "dtype": "fp8", "tp": 8, "engine": engine,
        })  # fmt: skip

    fused = aic.resolve_key(cfg("vllm", True))
    assert fused.filename().count("_arfused") == 1
    assert "_arfused" not in aic.resolve_key(cfg("vllm", False)).filename()
    got, note = _compile(fused)
    assert note == ""
    own, _ = _compile(aic.resolve_key(cfg("vllm", None)))
    trt, _ = _compile(aic.resolve_key(cfg("trtllm", None)))

    def ops(h: Any) -> dict[str, float]:
        kw = {"batch_size": 16, "s": 2048}
        found = probe_ops(lambda i: h.evaluate_generation_ops(i, **kw))
        return {str(o[0]): float(o[1]) for o in found}

    mine, vllm, theirs = ops(got), ops(own), ops(trt)
    comm = {n for n in mine if n.endswith(("_ar_1", "_ar_2", "_embedding_ar"))}
    assert len(comm) == 3
    for name, ms in mine.items():
        assert ms == (theirs[name] if name in comm else vllm[name])
    assert sum(vllm.values()) - sum(mine.values()) > 2.5
    with pytest.raises(ConfigError, match=r"engine.allreduce_fusion: got True; allowed: only "
                       r"with backend: vllm"):  # fmt: skip
        cfg("sglang", True)


def test_moe_activation_is_checked_before_anything_runs() -> None:
    base = {"model": "openai/gpt-oss-120b", "gpu": "h200_sxm", "backend": "vllm"}
    with pytest.raises(ConfigError, match=r"moe_activation: got 'fp8'; allowed: bf16 \| mxfp8"):
        DeploymentConfig.from_dict({**base, "dtype": "mxfp4", "moe_activation": "fp8"})
    with pytest.raises(ConfigError, match="unset unless dtype: mxfp4"):
        DeploymentConfig.from_dict({**base, "dtype": "bf16", "moe_activation": "mxfp8"})
    hopper = DeploymentConfig.from_dict({**base, "dtype": "mxfp4", "moe_activation": "mxfp8"})
    with pytest.raises(ConfigError, match="FP4 tensor cores only: Blackwell"):
        aic.resolve_key(hopper)
    with pytest.raises(ConfigError, match="FP4 tensor cores only: Blackwell"):
        check_feasible(replace(hopper, timing="roofline"))  # every timing, not only AIC's
    assert "moe_activation" not in DeploymentConfig.from_dict({**base, "dtype": "mxfp4"}).to_dict()


def test_a_bad_database_mode_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError, match=r"aic_database_mode: got 'measured'; allowed: hybrid"):
        DeploymentConfig.from_dict({"model": "Qwen/Qwen3-8B", "gpu": "h100_sxm",
                                    "aic_database_mode": "measured"})  # fmt: skip


def _row(**over: str) -> dict[str, str]:
    row = {
        "silicon_data_source": "source_file=x.csv; silicon_concurrency=8", "backend": "vllm",
        "model_path": "Qwen/Qwen3-235B-A22B-FP8", "system": "h200_sxm", "precision": "fp8",
        "mode": "agg", "isl": "1000", "osl": "100", "gemm_quant_mode": "fp8", "batch_size": "8",
        "tp_size": "1", "pp_size": "1", "attention_dp_size": "", "moe_tp_size": "2",
        "moe_ep_size": "1", "silicon_ttft_ms": "356.9", "silicon_tpot_ms": "54.9",
    }  # fmt: skip
    return row | over


def test_a_blank_attention_dp_column_is_inferred_from_the_moe_width() -> None:
    """vLLM data parallelism without EP: experts over DP x TP ranks, attention per DP rank."""
    row = parse_row(_row())
    assert (row.tp, row.attention_dp, row.moe_tp, row.ep) == (1, 2, 2, 1)
    assert row.concurrency == 8  # the clients the source records, not batch_size x DP
    stated = parse_row(_row(attention_dp_size="2", moe_tp_size="2"))
    assert (stated.attention_dp, stated.concurrency) == (2, 16)  # batch_size per DP rank
    plain = parse_row(_row(tp_size="2"))
    assert (plain.attention_dp, plain.concurrency) == (1, 8)


def test_unmeasured_expert_splits_are_timed_as_expert_parallelism_on_the_same_gpus() -> None:
    """gpt-oss on B200 TRT-LLM at moe_tp 2: the routed-expert op comes from ep 2's kernels."""
    key = aic.resolve_key(gpt_oss(2))
    own, _ = _compile(key, "HYBRID")
    mixed, note = _moe_as_expert_parallel(key, own)
    assert "measured moe_tp=1 ep=2 kernels" in note
    proxy_key = aic.resolve_key(DeploymentConfig.from_dict({**gpt_oss(2).to_dict(), "ep": 2}))
    proxy, _ = _compile(proxy_key, "SILICON")
    names = [str(own.evaluate_generation_ops([i], batch_size=1, s=16)[0][0]) for i in range(14)]
    moe = names.index("generation_moe")
    for i, name in enumerate(names):
        got = mixed.evaluate_generation_ops([i], batch_size=32, s=2048)[0]
        want = (proxy if i == moe else own).evaluate_generation_ops([i], batch_size=32, s=2048)[0]
        assert got == want, name  # only the routed experts are the proxy's
    assert own.evaluate_generation_ops([moe], batch_size=32, s=2048)[0][3] != "silicon"


def test_the_expert_parallel_proxy_is_closer_to_the_measurements_than_hybrid_alone() -> None:
    """The calibration group this rule was chosen on: gpt-oss-120b / b200_sxm / trtllm, TP 2."""
    from dataclasses import replace

    from dynosim.perf.calibration import HostCalibration
    from dynosim.validation.measurements import read_measurements
    from dynosim.validation.silicon import silicon_csv
    from dynosim.validation.validate import replay

    rows = [m for m in read_measurements(silicon_csv()) if m.mode == "agg" and m.refused is None
            and m.model == "openai/gpt-oss-120b" and m.gpu == "b200_sxm"
            and m.backend == "trtllm" and m.tp == 2]  # fmt: skip
    assert len(rows) >= 20
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EstimatedTimingWarning)
        errors = [
            abs(
                replay(
                    replace(r, client=None),
                    rounds=2,
                    host=HostCalibration(),
                    unrecorded_client="closed-loop",
                ).error("tpot")
            )
            for r in rows[::7]
        ]
    assert max(errors) < 0.35  # plain HYBRID estimates were 60-130% off on these rows
