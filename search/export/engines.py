"""The standalone servers of an aggregated deployment: vLLM, SGLang and TensorRT-LLM flags.

Each backend's flag builder returns ``(flags, notes, yaml_text)``; :func:`engine_part` runs one
server per worker replica, and Dynamo's workers (``search.export.dynamo``) reuse the same flags.

Flag names were checked against these sources (read for facts, no code copied):

* vLLM: ``vllm-project/vllm`` ``vllm/engine/arg_utils.py`` at 99d7eb5d (v0.11 era, late 2025:
  ``--tensor-parallel-size``, ``--max-num-seqs``, ``--max-num-batched-tokens``,
  ``--block-size`` with choices 1/8/16/32/64/128/256 from ``vllm/config/cache.py`` at c1d86421,
  ``--[no-]enable-prefix-caching`` and ``--[no-]enable-chunked-prefill`` as
  ``BooleanOptionalAction``, ``--gpu-memory-utilization``, ``--kv-cache-dtype``,
  ``--quantization``); ``vllm serve MODEL --host --port``.
* SGLang: the ``sglang`` 0.5.23 wheel, ``sglang/srt/arg_groups/fields/*.py`` (ServerArgs fields;
  the flag is ``--field-name``, a bool is ``store_true``): ``--model-path``, ``--tp-size``,
  ``--max-running-requests``, ``--chunked-prefill-size`` (-1 disables), ``--max-prefill-tokens``,
  ``--enable-mixed-chunk``, ``--page-size``, ``--disable-radix-cache``, ``--mem-fraction-static``,
  ``--kv-cache-dtype`` (fp8_e4m3 ...), ``--quantization``.
* TensorRT-LLM: ``NVIDIA/TensorRT-LLM`` ``tensorrt_llm/commands/serve.py`` at 00209af1
  (``trtllm-serve MODEL --backend --tp_size --max_batch_size --max_num_tokens
  --free_gpu_memory_fraction --extra_llm_api_options --enable_chunked_prefill``) and
  ``tensorrt_llm/llmapi/llm_args.py`` (2026 snapshot: ``KvCacheConfig.enable_block_reuse``,
  ``free_gpu_memory_fraction``, ``tokens_per_block``, ``dtype``; ``enable_chunked_prefill``).
* Host processes: vLLM ``--api-server-count`` (vllm-project/vllm PR #17546), SGLang
  ``--tokenizer-worker-num`` (sgl-project/sglang PR #8964), TensorRT-LLM
  ``--num_postprocess_workers`` (``tensorrt_llm/commands/serve.py``).
"""

from __future__ import annotations

import json
from typing import Any

from dynosim.config import DeploymentConfig
from dynosim.perf.hardware import GPUS_PER_NODE
from search.export.parts import FRONTEND_PORT, Command, Part, num
from search.export.quant import engine_env, needs_checkpoint, served_model, weight_flags

VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def devices(cfg: DeploymentConfig, replica: int) -> tuple[tuple[str, str], ...]:
    """The environment of worker replica ``replica``'s engine.

    ``CUDA_VISIBLE_DEVICES`` (none when the replica spans nodes) and the engine's own
    (:func:`~search.export.quant.engine_env`).
    """
    gpus = cfg.tp * cfg.attention_dp  # a replica's GPUs
    first = replica * gpus
    if gpus > GPUS_PER_NODE:
        return engine_env(cfg)
    ids = ",".join(str((first + i) % GPUS_PER_NODE) for i in range(gpus))
    return (("CUDA_VISIBLE_DEVICES", ids), *engine_env(cfg))


def _quant(cfg: DeploymentConfig, notes: list[str], kv_flag: tuple[str, str] | None) -> list[str]:
    """Weight-quantisation flags (:mod:`search.export.quant`) and the FP8 KV cache flag."""
    flags, more = weight_flags(cfg)
    notes += more
    if kv_flag is not None and cfg.kv_dtype == "fp8":
        flags += list(kv_flag)
    return flags


def _parallel(cfg: DeploymentConfig, notes: list[str]) -> list[str]:
    """Expert- and attention-data-parallel flags of vLLM and SGLang (TRT-LLM: in its YAML).

    vLLM: ``--data-parallel-size d`` ranks of ``--tensor-parallel-size tp``, and
    ``--enable-expert-parallel`` spreads the experts over all ``tp x d`` GPUs. SGLang:
    ``--tp-size`` counts every GPU of the replica, ``--enable-dp-attention --dp-size d`` splits
    attention into ``d`` ranks, ``--ep-size`` the experts.
    """
    dp, ep = cfg.attention_dp, cfg.ep
    flags: list[str] = []
    if cfg.backend == "vllm":
        if dp > 1:
            flags += ["--data-parallel-size", str(dp)]
        if ep > 1:
            flags.append("--enable-expert-parallel")
            if ep != cfg.tp * dp:
                notes.append(f"ep {ep}: vLLM's expert parallelism spans all tp x dp = "
                             f"{cfg.tp * dp} GPUs")  # fmt: skip
    elif cfg.backend == "sglang":
        if dp > 1:
            flags += ["--enable-dp-attention", "--dp-size", str(dp)]
        if ep > 1:
            flags += ["--ep-size", str(ep)]
    return flags


def _port(cfg: DeploymentConfig, replica: int) -> int:
    return FRONTEND_PORT if cfg.workers == 1 else FRONTEND_PORT + 1 + replica


def engine_part(cfg: DeploymentConfig, yaml_path: str) -> tuple[Part, str | None]:
    """One standalone server per worker replica, and the TRT-LLM YAML (``None`` otherwise)."""
    flags, notes, yaml_text = _ENGINE_FLAGS[cfg.backend](cfg, yaml_path)
    flags += _host_flags(cfg, notes)
    commands, model = [], served_model(cfg)
    for r in range(cfg.workers):
        host_port = ("--host", "0.0.0.0", "--port", str(_port(cfg, r)))
        prog = {
            "vllm": ("vllm", "serve", model),
            "sglang": ("python", "-m", "sglang.launch_server", "--model-path", model),
            "trtllm": ("trtllm-serve", model),
        }[cfg.backend]
        commands.append(Command((*prog, *host_port, *flags), devices(cfg, r)))
    if cfg.gpus > GPUS_PER_NODE:
        notes.append(
            f"{cfg.gpus} GPUs: replicas are numbered node by node ({GPUS_PER_NODE} GPUs a node); "
            "run each on its node"
        )
    title = f"engine: {cfg.workers} {cfg.backend} replica(s) x TP {cfg.tp}"
    return Part(title, tuple(commands), tuple(notes)), yaml_text


def _host_flags(cfg: DeploymentConfig, notes: list[str]) -> list[str]:
    """The host-process flags of a standalone server.

    vLLM ``--api-server-count`` (vllm-project/vllm PR #17546), SGLang ``--tokenizer-worker-num``
    (sgl-project/sglang PR #8964), TensorRT-LLM ``--num_postprocess_workers``
    (tensorrt_llm/commands/serve.py); the host's costs are simulator inputs with no flag.
    """
    h = cfg.host
    if h is None:
        return []
    if h.request_us or h.input_token_us or h.output_token_us:
        notes.append("host request_us/input_token_us/output_token_us: simulated CPU costs, no flag")
    if h.api_server_count is not None:
        return ["--api-server-count", str(h.api_server_count)]
    if h.tokenizer_workers is not None:
        return ["--tokenizer-worker-num", str(h.tokenizer_workers)]
    if h.postprocess_workers is not None:
        return ["--num_postprocess_workers", str(h.postprocess_workers)]
    return []


def vllm_flags(cfg: DeploymentConfig, _yaml: str) -> tuple[list[str], list[str], None]:
    """``vllm serve``'s engine flags and the notes on them."""
    e = cfg.engine
    flags = [
        "--tensor-parallel-size", str(cfg.tp),
        "--max-num-seqs", str(e.max_num_seqs),
        "--max-num-batched-tokens", str(e.max_num_batched_tokens),
    ]  # fmt: skip
    notes: list[str] = []
    flags += _parallel(cfg, notes)
    if e.block_size in VLLM_BLOCK_SIZES:
        flags += ["--block-size", str(e.block_size)]
    else:
        notes.append(f"block_size {e.block_size}: not a vLLM --block-size choice; left default")
    flags.append(
        "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    flags.append(
        "--enable-chunked-prefill" if e.enable_chunked_prefill else "--no-enable-chunked-prefill"
    )
    if not e.enable_chunked_prefill:
        notes.append(
            "without chunked prefill vLLM needs --max-num-batched-tokens >= the "
            "model's context length (--max-model-len)"
        )
    flags += ["--gpu-memory-utilization", num(e.gpu_memory_utilization)]
    if e.async_scheduling is not None:  # both flags exist since vLLM 0.14 (default on)
        flags.append("--async-scheduling" if e.async_scheduling else "--no-async-scheduling")
    if e.allreduce_fusion:  # the compilation pass (named enable_fi_allreduce_fusion before)
        flags += ["--compilation-config", '{"pass_config":{"fuse_allreduce_rms":true}}']
    flags += _quant(cfg, notes, kv_flag=("--kv-cache-dtype", "fp8"))
    sp = cfg.speculative
    if sp is not None and sp.num_speculative_tokens:
        spec: dict[str, Any] = {
            "method": {"mtp": "mtp", "eagle": "eagle", "draft": "draft_model"}[sp.method],
            "num_speculative_tokens": sp.num_speculative_tokens,
        }
        if sp.draft_model is not None:
            spec["model"] = sp.draft_model
        flags += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        if sp.method == "eagle":
            notes.append('speculative eagle: add "model": <the EAGLE head checkpoint>')
    return flags, notes, None


def sglang_flags(cfg: DeploymentConfig, _yaml: str) -> tuple[list[str], list[str], None]:
    """``sglang.launch_server``'s engine flags and the notes on them."""
    e = cfg.engine
    flags = [
        "--tp-size", str(cfg.tp * cfg.attention_dp),
        "--max-running-requests", str(e.max_num_seqs),
    ]  # fmt: skip
    flags += _parallel(cfg, [])
    if e.max_prefill_tokens is not None:
        flags += ["--max-prefill-tokens", str(e.max_prefill_tokens)]
    if e.enable_chunked_prefill:
        flags += ["--chunked-prefill-size", str(e.max_num_batched_tokens)]
    else:
        flags += ["--chunked-prefill-size", "-1"]
    if e.enable_mixed_chunk:
        flags.append("--enable-mixed-chunk")
    if e.schedule_policy is not None:
        flags += ["--schedule-policy", e.schedule_policy]
    if e.schedule_conservativeness is not None:
        flags += ["--schedule-conservativeness", num(e.schedule_conservativeness)]
    if e.scheduler_recv_interval is not None:
        flags += ["--scheduler-recv-interval", str(e.scheduler_recv_interval)]
    flags += ["--page-size", str(e.block_size)]
    if not e.enable_prefix_caching:
        flags.append("--disable-radix-cache")
    flags += ["--mem-fraction-static", num(e.gpu_memory_utilization)]
    notes = [
        "max_num_batched_tokens -> --chunked-prefill-size: SGLang bounds the prefill tokens of "
        "a batch with it (and --max-prefill-tokens, default 16384); decode tokens are not "
        "counted against it unless --enable-mixed-chunk",
        "gpu_memory_utilization -> --mem-fraction-static: SGLang's fraction covers weights and "
        "the KV pool only (activations come out of the rest)",
    ]
    flags += _quant(cfg, notes, kv_flag=("--kv-cache-dtype", "fp8_e4m3"))
    sp = cfg.speculative
    if sp is not None and sp.num_speculative_tokens:
        k = sp.num_speculative_tokens
        algo = {"mtp": "NEXTN", "eagle": "EAGLE", "draft": "STANDALONE"}[sp.method]
        flags += [
            "--speculative-algorithm", algo, "--speculative-num-steps", str(k),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1),
        ]  # fmt: skip
        if sp.draft_model is not None:
            flags += ["--speculative-draft-model-path", sp.draft_model]
        if sp.method == "eagle":
            notes.append("speculative eagle: add --speculative-draft-model-path <EAGLE head>")
    return flags, notes, None


def trtllm_options(cfg: DeploymentConfig) -> dict[str, Any]:
    """The ``--extra_llm_api_options`` YAML content (LLM API fields) as a dict."""
    e = cfg.engine
    kv: dict[str, Any] = {
        "enable_block_reuse": e.enable_prefix_caching,
        "free_gpu_memory_fraction": e.gpu_memory_utilization,
        "tokens_per_block": e.block_size,
    }
    if cfg.kv_dtype == "fp8":
        kv["dtype"] = "fp8"
    out: dict[str, Any] = {
        "enable_chunked_prefill": e.enable_chunked_prefill,
        "kv_cache_config": kv,
    }
    if cfg.attention_dp > 1:  # tp_size counts every GPU; attention runs in DP ranks
        out["enable_attention_dp"] = True
        if e.attention_dp_enable_balance:  # LLM API AttentionDpConfig (its defaults: 50, 10)
            balance: dict[str, Any] = {"enable_balance": True}
            if e.attention_dp_timeout_iters is not None:
                balance["timeout_iters"] = e.attention_dp_timeout_iters
            if e.attention_dp_batching_wait_iters is not None:
                balance["batching_wait_iters"] = e.attention_dp_batching_wait_iters
            out["attention_dp_config"] = balance
    if cfg.ep > 1 or cfg.moe_tp is not None:
        out["moe_expert_parallel_size"] = cfg.ep
        out["moe_tensor_parallel_size"] = cfg.moe_tp_size
    # LLM API SchedulerConfig (tensorrt_llm/llmapi/llm_args.py); the default is the simulated one
    out["scheduler_config"] = {
        "capacity_scheduler_policy": e.capacity_scheduler_policy or "GUARANTEED_NO_EVICT"
    }
    # LLM API batch waiting (TorchLlmArgs); left out at TRT-LLM's default (off)
    if e.batch_wait_timeout_iters:
        out["batch_wait_timeout_iters"] = e.batch_wait_timeout_iters
    if e.batch_wait_max_tokens_ratio:
        out["batch_wait_max_tokens_ratio"] = e.batch_wait_max_tokens_ratio
    sp = cfg.speculative
    if sp is not None and sp.num_speculative_tokens and sp.method != "draft":
        k = sp.num_speculative_tokens
        out["speculative_config"] = (
            {"decoding_type": "MTP", "num_nextn_predict_layers": k}
            if sp.method == "mtp"
            else {"decoding_type": "Eagle", "max_draft_len": k}
        )  # LLM API MTPDecodingConfig / EagleDecodingConfig (tensorrt_llm/llmapi/llm_args.py)
    return out


def _trtllm(cfg: DeploymentConfig, yaml_path: str) -> tuple[list[str], list[str], str]:
    import yaml

    e = cfg.engine
    flags = [
        "--backend", "pytorch",
        "--tp_size", str(cfg.tp * cfg.attention_dp),
        "--max_batch_size", str(e.max_num_seqs),
        "--max_num_tokens", str(e.max_num_batched_tokens),
        "--free_gpu_memory_fraction", num(e.gpu_memory_utilization),
        "--extra_llm_api_options", yaml_path,
    ]  # fmt: skip
    if e.enable_chunked_prefill:
        flags.append("--enable_chunked_prefill")
    notes = [
        "gpu_memory_utilization -> free_gpu_memory_fraction: TRT-LLM takes that fraction of the "
        "memory left after weights and buffers for the KV cache (vLLM: of the whole GPU)",
        "the YAML overrides the flags it repeats; block_size -> kv_cache_config.tokens_per_block, "
        "enable_prefix_caching -> kv_cache_config.enable_block_reuse",
    ]
    _quant(cfg, notes, kv_flag=None)
    if needs_checkpoint(cfg):
        notes.append(
            f"dtype {cfg.dtype}: TRT-LLM reads the weights' quantization from "
            f"{served_model(cfg)}; the YAML sets the KV cache dtype"
        )
    text = yaml.safe_dump(trtllm_options(cfg), sort_keys=False)
    return flags, notes, text


_ENGINE_FLAGS = {"vllm": vllm_flags, "sglang": sglang_flags, "trtllm": _trtllm}
