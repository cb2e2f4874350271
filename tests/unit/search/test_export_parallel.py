"""Export of expert / attention-data parallelism and quantisation, per backend."""

from __future__ import annotations

import yaml

from dynosim.config import DeploymentConfig
from search.export import engine_part


def _argv(backend: str, **fields: object) -> tuple[list[str], str | None, tuple[str, ...]]:
    data = {"model": "deepseek-ai/DeepSeek-R1", "gpu": "h200_sxm", "backend": backend,
            "dtype": "fp8", "tp": 1, "attention_dp": 8, "ep": 8} | fields  # fmt: skip
    part, text = engine_part(DeploymentConfig.from_dict(data), "/tmp/x.yaml")
    return list(part.commands[0].argv), text, part.notes


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_vllm_runs_dp_ranks_of_tp_with_expert_parallelism() -> None:
    argv, _, _ = _argv("vllm")
    assert _after(argv, "--tensor-parallel-size") == "1"
    assert _after(argv, "--data-parallel-size") == "8"
    assert "--enable-expert-parallel" in argv
    _, _, notes = _argv("vllm", tp=2, attention_dp=4, ep=4)
    assert any("spans all tp x dp = 8 GPUs" in n for n in notes)


def test_sglang_counts_every_gpu_in_tp_size() -> None:
    argv, _, _ = _argv("sglang")
    assert _after(argv, "--tp-size") == "8"
    assert _after(argv, "--dp-size") == "8"
    assert "--enable-dp-attention" in argv
    assert _after(argv, "--ep-size") == "8"


def test_trtllm_yaml_has_attention_dp_and_the_moe_split() -> None:
    argv, text, _ = _argv("trtllm", tp=2, attention_dp=4, ep=4)
    assert _after(argv, "--tp_size") == "8"
    options = yaml.safe_load(text or "")
    assert options["enable_attention_dp"] is True
    assert (options["moe_expert_parallel_size"], options["moe_tensor_parallel_size"]) == (4, 2)


def test_trtllm_yaml_has_the_attention_dp_balancing_it_simulated() -> None:
    engine = {"attention_dp_enable_balance": True, "attention_dp_timeout_iters": 60,
              "attention_dp_batching_wait_iters": 0}  # fmt: skip
    _, text, _ = _argv("trtllm", engine=engine)
    options = yaml.safe_load(text or "")
    want = {"enable_balance": True, "timeout_iters": 60, "batching_wait_iters": 0}
    assert options["attention_dp_config"] == want
    _, text, _ = _argv("trtllm")
    assert "attention_dp_config" not in yaml.safe_load(text or "")  # off: TRT-LLM's default


def test_dense_single_rank_deployments_get_no_parallel_flags() -> None:
    data = {"model": "meta-llama/Meta-Llama-3.1-8B", "gpu": "h200_sxm", "tp": 2}
    part, _ = engine_part(DeploymentConfig.from_dict(data), "/tmp/x.yaml")
    argv = list(part.commands[0].argv)
    assert "--data-parallel-size" not in argv
    assert "--enable-expert-parallel" not in argv


def test_fp8_kv_cache_of_its_own_is_exported() -> None:
    data = {"model": "meta-llama/Meta-Llama-3.1-8B", "gpu": "h200_sxm", "kv_cache_dtype": "fp8"}
    part, _ = engine_part(DeploymentConfig.from_dict(data), "/tmp/x.yaml")
    argv = list(part.commands[0].argv)
    assert _after(argv, "--kv-cache-dtype") == "fp8"
