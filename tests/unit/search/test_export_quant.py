"""Exports of fp8 and nvfp4 trials launch the quantised weights that were simulated (issue 20)."""

from __future__ import annotations

from typing import Any

import pytest

from dynosim.config import DeploymentConfig
from search.export import Export, TrialInfo, export_trial

MODEL = "meta-llama/Llama-3.1-70B"


def run(**fields: Any) -> Export:
    base = {"model": MODEL, "gpu": "h200_sxm"} | ({} if "mode" in fields else {"tp": 4})
    cfg = DeploymentConfig.from_dict(base | fields)
    info = TrialInfo(study_name="q", number=1, feasible=True, reason=None, metrics={})
    return export_trial(cfg.to_dict(), {}, info)


def after(argv: tuple[str, ...], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def engine_models(ex: Export) -> set[str]:
    """The checkpoint every engine command of the export loads."""
    out = set()
    for part in (ex.engine, *([ex.router] if ex.router else []), *ex.pools):
        for c in part.commands:
            a = c.argv
            if a[:2] == ("vllm", "serve") or a[0] == "trtllm-serve":
                out.add(a[2] if a[0] == "vllm" else a[1])
            for flag in ("--model", "--model-path"):
                if flag in a and a[:3] != ("python", "-m", "dynamo.frontend"):
                    out.add(str(after(a, flag)))
    return out


@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_trtllm_fp8_serves_the_fp8_checkpoint_it_makes(mode: str) -> None:
    layout: dict[str, Any] = {"workers": 2}
    if mode == "disagg":
        layout = {"mode": "disagg", "prefill": {"tp": 2, "workers": 1},
                  "decode": {"tp": 4, "workers": 1}}  # fmt: skip
    ex = run(backend="trtllm", dtype="fp8", **layout)
    assert ex.checkpoint is not None
    (make,) = ex.checkpoint.commands
    ckpt = after(make.argv, "--export_path")
    assert ckpt == "checkpoints/Llama-3.1-70B-FP8"
    assert after(make.argv, "--pyt_ckpt_path") == MODEL
    assert after(make.argv, "--qformat") == "fp8"
    assert after(make.argv, "--kv_cache_qformat") == "fp8"  # dtype fp8 = FP8 KV cache too
    assert engine_models(ex) == {ckpt}  # never the BF16 model
    assert after(ex.aiperf.commands[0].argv, "--model") == ckpt
    text = ex.to_text()  # the checkpoint is made before any engine starts
    first_engine = min(text.find(w) for w in ("trtllm-serve", "dynamo.trtllm") if w in text)
    assert text.index("# ---- checkpoint") < text.index("--export_path") < first_engine


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_vllm_and_sglang_fp8_quantise_the_bf16_checkpoint_online(backend: str) -> None:
    ex = run(backend=backend, dtype="fp8", workers=2)
    assert ex.checkpoint is None
    assert engine_models(ex) == {MODEL}
    for part in (ex.engine, ex.router):
        assert part is not None
        for c in part.commands:
            if "dynamo.frontend" not in c.argv:
                assert after(c.argv, "--quantization") == "fp8"


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_nvfp4_serves_a_modelopt_checkpoint_without_an_online_flag(backend: str) -> None:
    ex = run(backend=backend, dtype="nvfp4", gpu="b200_sxm", workers=1)
    assert ex.checkpoint is not None
    ckpt = after(ex.checkpoint.commands[0].argv, "--export_path")
    assert ckpt == "checkpoints/Llama-3.1-70B-NVFP4"
    assert after(ex.checkpoint.commands[0].argv, "--qformat") == "nvfp4"
    assert engine_models(ex) == {ckpt}
    assert all("--quantization" not in c.argv for c in ex.engine.commands)


def test_bf16_has_no_checkpoint_step() -> None:
    ex = run(backend="trtllm", dtype="bf16")
    assert ex.checkpoint is None
    assert engine_models(ex) == {MODEL}
    assert ex.to_dict()["checkpoint"] is None


_8B_FP8 = "nvidia/Llama-3.1-8B-Instruct-FP8"  # a ModelOpt FP8 checkpoint: static scales


def _engine_commands(ex: Export) -> list[Any]:
    return [c for part in (ex.engine, *([ex.router] if ex.router else []), *ex.pools)
            for c in part.commands if "dynamo.frontend" not in c.argv]  # fmt: skip


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_a_released_fp8_checkpoint_is_served_as_named(backend: str) -> None:
    """vLLM and SGLang read ``modelopt`` from the checkpoint and refuse ``--quantization fp8``;
    TensorRT-LLM serves it as is (no ModelOpt run over already-quantised weights)."""
    ex = run(backend=backend, dtype="fp8", model=_8B_FP8, tp=1, workers=2)
    assert ex.checkpoint is None
    assert engine_models(ex) == {_8B_FP8}
    for c in _engine_commands(ex):
        assert "--quantization" not in c.argv


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_static_scales_on_a_bf16_checkpoint_serve_modelopts_export(backend: str) -> None:
    """Online ``--quantization fp8`` computes each activation's scale per step (dynamic): a
    trial simulated with static scales must launch the ModelOpt export that ships them."""
    ex = run(backend=backend, dtype="fp8", fp8_scales="static", workers=1)
    assert ex.checkpoint is not None
    ckpt = after(ex.checkpoint.commands[0].argv, "--export_path")
    assert engine_models(ex) == {ckpt}
    for c in _engine_commands(ex):
        assert "--quantization" not in c.argv


def test_trtllm_says_its_fp8_export_is_not_the_simulated_dynamic_scales() -> None:
    dynamic = run(backend="trtllm", dtype="fp8", fp8_scales="dynamic", workers=1)
    static = run(backend="trtllm", dtype="fp8", fp8_scales="static", workers=1)
    assert any("fp8_scales dynamic" in n for n in dynamic.engine.notes)
    assert not any("fp8_scales" in n for n in static.engine.notes)
    assert dynamic.checkpoint is not None
    assert static.checkpoint is not None


@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_vllm_mxfp8_experts_set_flashinfers_switch(mode: str) -> None:
    layout: dict[str, Any] = {"workers": 2, "tp": 2}
    if mode == "disagg":
        layout = {"mode": "disagg", "prefill": {"tp": 2, "workers": 1},
                  "decode": {"tp": 2, "workers": 1}}  # fmt: skip
    base = {"backend": "vllm", "dtype": "mxfp4", "model": "openai/gpt-oss-120b",
            "gpu": "b200_sxm", **layout}  # fmt: skip
    switch = ("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8", "1")
    on = _engine_commands(run(**base, moe_activation="mxfp8"))
    off = _engine_commands(run(**base, moe_activation="bf16"))
    assert on
    assert all(switch in c.env for c in on)
    assert all(switch not in c.env for c in off)
    assert all("CUDA_VISIBLE_DEVICES" in dict(c.env) for c in on)
