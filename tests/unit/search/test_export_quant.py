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
