"""Exported commands parse with parsers that mirror the real tools' flags (see search.export)."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import yaml

from dynosim.config import DeploymentConfig
from dynosim.errors import DynosimError
from search.export import Command, Export, TrialInfo, export_trial

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TRACE = "/data/mooncake/conversation_trace.jsonl"
SPEC: dict[str, Any] = {
    "requests": 2000,
    "warmup_requests": 100,
    "arrival": {"process": "closed_loop", "concurrency": 32, "ramp_up_s": 5},
    "input_tokens": {"dist": "lognormal", "mean": 1024, "sigma": 0.5},
    "output_tokens": {"dist": "uniform", "low": 128, "high": 384},
    "prefix": {"groups": 8, "tokens": 512},
    "sessions": {"turns": 3, "think_time_s": 1.5},
    "seed": 7,
}


class ParseError(AssertionError):
    """A command did not parse: a misspelt flag or a value of the wrong type."""


class Parser(argparse.ArgumentParser):
    def __init__(self, prog: str) -> None:  # no prefix matching: a misspelt flag must fail
        super().__init__(prog=prog, allow_abbrev=False)

    def error(self, message: str) -> Any:  # argparse would exit; fail the test instead
        raise ParseError(message)


def _bool_opt(p: argparse.ArgumentParser, flag: str) -> None:
    p.add_argument(flag, action=argparse.BooleanOptionalAction)


def vllm_parser(*, dynamo: bool = False) -> Parser:
    """``vllm serve`` (vllm/engine/arg_utils.py + cache.py literals); ``dynamo.vllm`` alike."""
    p = Parser(prog="vllm")
    if dynamo:
        p.add_argument("--model", required=True)
    else:
        p.add_argument("serve", choices=["serve"])
        p.add_argument("model_tag")
        p.add_argument("--host")
        p.add_argument("--port", type=int)
    p.add_argument("--tensor-parallel-size", "-tp", type=int)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-num-batched-tokens", type=int)
    p.add_argument("--block-size", type=int, choices=[1, 8, 16, 32, 64, 128, 256])
    _bool_opt(p, "--enable-prefix-caching")
    _bool_opt(p, "--enable-chunked-prefill")
    _bool_opt(p, "--async-scheduling")  # vllm/config/scheduler.py async_scheduling (0.14+)
    p.add_argument("--compilation-config", "-O", type=json.loads)  # a CompilationConfig as JSON
    p.add_argument("--gpu-memory-utilization", type=float)
    cache = ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"]
    p.add_argument("--kv-cache-dtype", choices=cache)
    p.add_argument("--quantization", "-q")
    return p


def sglang_parser(*, dynamo: bool = False) -> Parser:
    """``python -m sglang.launch_server`` (sglang 0.5.23 ServerArgs fields); bools store_true."""
    p = Parser(prog="sglang")
    if not dynamo:
        p.add_argument("--host")
        p.add_argument("--port", type=int)
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--tp-size", "--tensor-parallel-size", type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--max-prefill-tokens", type=int)
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--enable-mixed-chunk", action="store_true")
    p.add_argument("--schedule-policy", choices=["fcfs", "lpm", "random", "dfs-weight", "lof"])
    p.add_argument("--schedule-conservativeness", type=float)
    p.add_argument("--page-size", type=int)
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--mem-fraction-static", type=float)
    kv = ["auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"]
    p.add_argument("--kv-cache-dtype", choices=kv)
    p.add_argument("--quantization", choices=["fp8", "modelopt_fp8", "w8a8_fp8", "awq"])
    return p


def trtllm_parser() -> Parser:
    """``trtllm-serve MODEL`` (tensorrt_llm/commands/serve.py click options)."""
    p = Parser(prog="trtllm-serve")
    p.add_argument("model")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--backend", choices=["pytorch", "tensorrt", "_autodeploy", "trt"])
    p.add_argument("--tensor_parallel_size", "--tp_size", type=int)
    p.add_argument("--max_batch_size", type=int)
    p.add_argument("--max_num_tokens", type=int)
    p.add_argument("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction", type=float)
    p.add_argument("--config", "--extra_llm_api_options", dest="extra_llm_api_options")
    p.add_argument("--enable_chunked_prefill", action="store_true")
    return p


def dynamo_trtllm_parser() -> Parser:
    """``python -m dynamo.trtllm`` (ai-dynamo 1.6.1 dynamo/trtllm/backend_args.py)."""
    p = Parser(prog="dynamo.trtllm")
    p.add_argument("--model", required=True)
    for flag in ("--tensor-parallel-size", "--max-batch-size", "--max-num-tokens"):
        p.add_argument(flag, type=int)
    p.add_argument("--kv-block-size", type=int)
    p.add_argument("--free-gpu-memory-fraction", type=float)
    p.add_argument("--extra-engine-args")
    _bool_opt(p, "--publish-kv-events")
    return p


def frontend_parser() -> Parser:
    """``python -m dynamo.frontend`` (ai-dynamo 1.6.1 frontend + router arg groups)."""
    p = Parser(prog="dynamo.frontend")
    p.add_argument("--http-port", type=int)
    modes = ["round-robin", "random", "power-of-two", "kv", "direct", "least-loaded",
             "device-aware-weighted"]  # fmt: skip
    p.add_argument("--router-mode", choices=modes)
    p.add_argument("--router-kv-overlap-score-weight", "--kv-overlap-score-weight", type=float)
    p.add_argument("--router-temperature", type=float)
    p.add_argument("--kv-cache-block-size", type=int)
    return p


def _goodput(text: str) -> dict[str, float]:
    tags = {"time_to_first_token", "inter_token_latency", "request_latency"}
    out = {}
    for item in text.split():
        key, _, value = item.partition(":")
        if key not in tags:
            raise argparse.ArgumentTypeError(f"unknown goodput tag {key}")
        out[key] = float(value)
    return out


def aiperf_parser() -> Parser:
    """``aiperf profile`` (aiperf 0.13.0 aiperf/config/flags/cli_config.py)."""
    p = Parser(prog="aiperf")
    p.add_argument("profile", choices=["profile"])
    p.add_argument("--model", "--model-names", "-m", required=True)
    p.add_argument("--url", "-u", action="append")
    p.add_argument("--endpoint-type", choices=["chat", "completions"])
    p.add_argument("--streaming", action="store_true")
    p.add_argument("--concurrency", type=int)
    p.add_argument("--concurrency-ramp-duration", type=float)
    p.add_argument("--request-rate", type=float)
    p.add_argument("--arrival-pattern", "--request-rate-mode",
                   choices=["concurrency_burst", "constant", "gamma", "poisson"])  # fmt: skip
    p.add_argument("--arrival-smoothness", "--vllm-burstiness", type=float)
    p.add_argument("--request-count", "--num-requests", type=int)
    p.add_argument("--warmup-request-count", "--num-warmup-requests", type=int)
    p.add_argument("--isl", "--prompt-input-tokens-mean", type=int)
    p.add_argument("--isl-stddev", "--prompt-input-tokens-stddev", type=float)
    p.add_argument("--osl", "--prompt-output-tokens-mean", type=int)
    p.add_argument("--osl-stddev", "--prompt-output-tokens-stddev", type=float)
    p.add_argument("--extra-inputs", action="append")
    p.add_argument("--num-prefix-prompts", "--prompt-prefix-pool-size", type=int)
    p.add_argument("--prefix-prompt-length", "--prompt-prefix-length", type=int)
    p.add_argument("--session-turns-mean", "--conversation-turn-mean", type=int)
    p.add_argument("--session-turn-delay-mean", "--conversation-turn-delay-mean", type=float)
    p.add_argument("--input-file")
    datasets = ["mooncake_trace", "multi_turn", "random_pool", "single_turn"]
    p.add_argument("--custom-dataset-type", choices=datasets)
    p.add_argument("--fixed-schedule", action="store_true")
    p.add_argument("--no-fixed-schedule", action="store_true")
    p.add_argument("--synthesis-speedup-ratio", type=float)
    p.add_argument("--random-seed", type=int)
    p.add_argument("--goodput", type=_goodput)
    p.add_argument("--output-artifact-dir")
    return p


def parse(parser: Parser, cmd: Command, skip: int) -> argparse.Namespace:
    """Parse ``cmd`` after its first ``skip`` words, from its printed form."""
    words = shlex.split(cmd.text().replace("\\\n", " "))
    assert words[: len(cmd.env)] == [f"{k}={v}" for k, v in cmd.env]
    argv = words[len(cmd.env) :]
    assert argv == list(cmd.argv)
    return parser.parse_args(argv[skip:])


def config(**fields: Any) -> dict[str, Any]:
    return DeploymentConfig.from_dict({"model": MODEL, "gpu": "h200_sxm", **fields}).to_dict()


def run(cfg: dict[str, Any], study: dict[str, Any] | None = None, **kw: Any) -> Export:
    metrics = kw.pop("metrics", {})
    info = TrialInfo(study_name="demo", number=4, feasible=kw.pop("feasible", True),
                     reason=kw.pop("reason", None), metrics=metrics)  # fmt: skip
    return export_trial(cfg, study or {}, info, **kw)


ENGINE = {"max_num_seqs": 128, "max_num_batched_tokens": 4096, "block_size": 32,
          "gpu_memory_utilization": 0.85}  # fmt: skip


@pytest.mark.parametrize("caching", [True, False])
@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_vllm_commands_parse(caching: bool, chunked: bool, dtype: str) -> None:
    engine = {**ENGINE, "enable_prefix_caching": caching, "enable_chunked_prefill": chunked}
    ex = run(config(backend="vllm", tp=2, workers=3, dtype=dtype, engine=engine))
    assert len(ex.engine.commands) == 3
    ports = []
    for i, cmd in enumerate(ex.engine.commands):
        a = parse(vllm_parser(), cmd, 1)
        assert a.model_tag == MODEL
        assert (a.tensor_parallel_size, a.max_num_seqs, a.max_num_batched_tokens) == (2, 128, 4096)
        assert (a.block_size, a.gpu_memory_utilization) == (32, 0.85)
        assert a.enable_prefix_caching is caching
        assert a.enable_chunked_prefill is chunked
        assert (a.kv_cache_dtype, a.quantization) == (
            ("fp8", "fp8") if dtype == "fp8" else (None, None)
        )
        assert dict(cmd.env)["CUDA_VISIBLE_DEVICES"] == f"{2 * i},{2 * i + 1}"
        ports.append(a.port)
    assert ports == [8001, 8002, 8003]
    assert ex.router is not None
    for cmd in ex.router.commands[1:]:
        w = parse(vllm_parser(dynamo=True), cmd, 3)
        assert (w.model, w.enable_prefix_caching) == (MODEL, caching)


@pytest.mark.parametrize("value", [None, True, False])
def test_vllm_async_scheduling_flag(value: bool | None) -> None:
    engine = {} if value is None else {"async_scheduling": value}
    ex = run(config(backend="vllm", engine=engine))
    for cmd in ex.engine.commands:
        assert parse(vllm_parser(), cmd, 1).async_scheduling is value


@pytest.mark.parametrize("value", [None, True, False])
def test_vllm_allreduce_fusion_is_the_compilation_pass(value: bool | None) -> None:
    engine = {} if value is None else {"allreduce_fusion": value}
    ex = run(config(backend="vllm", tp=2, engine=engine))
    for cmd in ex.engine.commands:
        passes = (parse(vllm_parser(), cmd, 1).compilation_config or {}).get("pass_config", {})
        assert passes.get("fuse_allreduce_rms", False) is bool(value)


def test_trtllm_batch_waiting_goes_into_the_llm_api_yaml() -> None:
    engine = {**ENGINE, "batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}
    ex = run(config(backend="trtllm", engine=engine), yaml_dir="out")
    assert ex.trtllm_yaml is not None
    options = yaml.safe_load(ex.trtllm_yaml)
    assert (options["batch_wait_timeout_iters"], options["batch_wait_max_tokens_ratio"]) == (
        20, 0.9
    )  # fmt: skip
    plain = yaml.safe_load(run(config(backend="trtllm"), yaml_dir="out").trtllm_yaml or "")
    assert "batch_wait_timeout_iters" not in plain


def test_vllm_block_size_without_equivalent_is_a_note() -> None:
    ex = run(config(backend="vllm", engine={"block_size": 512}))
    a = parse(vllm_parser(), ex.engine.commands[0], 1)
    assert a.block_size is None
    assert any("block_size 512" in n for n in ex.engine.notes)
    assert "# block_size 512" in ex.to_text()


@pytest.mark.parametrize("caching", [True, False])
@pytest.mark.parametrize("chunked", [True, False])
def test_sglang_commands_parse(caching: bool, chunked: bool) -> None:
    engine = {**ENGINE, "enable_prefix_caching": caching, "enable_chunked_prefill": chunked,
              "enable_mixed_chunk": chunked, "max_prefill_tokens": 8192 if chunked else None,
              "schedule_policy": "lpm"}  # fmt: skip
    ex = run(config(backend="sglang", tp=4, workers=2, dtype="fp8", engine=engine))
    for cmd in ex.engine.commands:
        a = parse(sglang_parser(), cmd, 3)
        assert (a.model_path, a.tp_size, a.max_running_requests) == (MODEL, 4, 128)
        assert a.chunked_prefill_size == (4096 if chunked else -1)
        assert a.enable_mixed_chunk is chunked
        assert a.max_prefill_tokens == (8192 if chunked else None)  # None: SGLang's default
        assert a.schedule_policy == "lpm"
        assert (a.page_size, a.mem_fraction_static) == (32, 0.85)
        assert a.disable_radix_cache is not caching
        assert (a.kv_cache_dtype, a.quantization) == ("fp8_e4m3", "fp8")
    assert ex.router is not None
    for cmd in ex.router.commands[1:]:
        assert parse(sglang_parser(dynamo=True), cmd, 3).tp_size == 4


@pytest.mark.parametrize("caching", [True, False])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_trtllm_command_and_yaml(caching: bool, dtype: str) -> None:
    engine = {**ENGINE, "enable_prefix_caching": caching, "enable_chunked_prefill": True}
    ex = run(config(backend="trtllm", tp=2, workers=2, router="kv_aware", dtype=dtype,
                    engine=engine), yaml_dir="out")  # fmt: skip
    assert ex.trtllm_yaml is not None
    assert ex.trtllm_yaml_path == "out/trtllm-demo-trial4.yaml"
    for cmd in ex.engine.commands:
        a = parse(trtllm_parser(), cmd, 1)
        # an fp8 trial serves its FP8 checkpoint (issue 20: not the BF16 model it names)
        served = MODEL if dtype == "bf16" else "checkpoints/Llama-3.1-8B-Instruct-FP8"
        assert (a.model, a.backend, a.tensor_parallel_size) == (served, "pytorch", 2)
        assert (a.max_batch_size, a.max_num_tokens, a.free_gpu_memory_fraction) == (128, 4096, 0.85)
        assert a.extra_llm_api_options == ex.trtllm_yaml_path
        assert a.enable_chunked_prefill is True
    options = yaml.safe_load(ex.trtllm_yaml)
    assert options["enable_chunked_prefill"] is True
    kv = options["kv_cache_config"]
    assert kv["enable_block_reuse"] is caching
    assert (kv["free_gpu_memory_fraction"], kv["tokens_per_block"]) == (0.85, 32)
    assert kv.get("dtype") == ("fp8" if dtype == "fp8" else None)
    assert set(kv) <= {"enable_block_reuse", "free_gpu_memory_fraction", "tokens_per_block",
                       "dtype"}  # fmt: skip
    assert ex.router is not None
    for cmd in ex.router.commands[1:]:
        w = parse(dynamo_trtllm_parser(), cmd, 3)
        assert (w.tensor_parallel_size, w.kv_block_size, w.publish_kv_events) == (2, 32, True)
        assert w.extra_engine_args == ex.trtllm_yaml_path
    assert "enable_block_reuse" in ex.to_text()


@pytest.mark.parametrize(
    ("router", "mode"),
    [("round_robin", "round-robin"), ("random", "random"), ("least_loaded", "least-loaded"),
     ("kv_aware", "kv")],
)  # fmt: skip
def test_router_frontend_parses(router: str, mode: str) -> None:
    ex = run(config(workers=4, router=router, kv_router={"overlap_weight": 1.5,
                                                         "temperature": 0.25}))  # fmt: skip
    assert ex.router is not None
    a = parse(frontend_parser(), ex.router.commands[0], 3)
    assert (a.http_port, a.router_mode) == (8000, mode)
    if router == "kv_aware":
        assert (a.router_kv_overlap_score_weight, a.router_temperature) == (1.5, 0.25)
        assert a.kv_cache_block_size == 64
    else:
        assert a.router_kv_overlap_score_weight is None


def test_single_worker_has_no_router() -> None:
    ex = run(config(workers=1))
    assert ex.router is None
    assert parse(vllm_parser(), ex.engine.commands[0], 1).port == 8000


def _aiperf(ex: Export) -> argparse.Namespace:
    """The check at the trial's load_level (a capacity study's: the check at capacity)."""
    return parse(aiperf_parser(), (ex.capacity_check or ex.aiperf).commands[0], 1)


def test_aiperf_trace_replay_at_load_level() -> None:
    study = {"workload": {"trace": TRACE, "speedup": 2.0, "max_requests": 500},
             "load": {"mode": "capacity", "axis": "speedup"}}  # fmt: skip
    ex = run(config(workers=2), study, metrics={"load_level": 3.5})
    a = _aiperf(ex)
    assert (a.input_file, a.custom_dataset_type, a.fixed_schedule) == (
        TRACE,
        "mooncake_trace",
        True,
    )
    assert (a.synthesis_speedup_ratio, a.request_count) == (3.5, 500)
    assert a.streaming
    assert a.url == ["localhost:8000"]
    assert a.goodput == {"time_to_first_token": 2000.0, "inter_token_latency": 50.0}
    assert ex.capacity_check is not None
    assert "speedup = 3.5" in ex.capacity_check.title
    # the first check is at the study's own load (issue 20: not only at the capacity)
    own = parse(aiperf_parser(), ex.aiperf.commands[0], 1)
    assert (own.synthesis_speedup_ratio, own.request_count) == (2.0, 500)
    assert "as written" in ex.aiperf.title
    fixed = _aiperf(run(config(), {"workload": {"trace": TRACE, "speedup": 2.0}}))
    assert fixed.synthesis_speedup_ratio == 2.0
    plain = _aiperf(run(config(), {"workload": {"trace": TRACE}}))
    assert plain.synthesis_speedup_ratio is None


def test_aiperf_azure_trace_needs_conversion_note() -> None:
    ex = run(config(), {"workload": {"trace": "/t/azure.csv"}})
    assert _aiperf(ex).input_file == "/t/azure.jsonl"
    assert any("--aiperf-trace /t/azure.jsonl" in n for n in ex.aiperf.notes)


def test_aiperf_closed_loop_synthetic() -> None:
    ex = run(config(slo={"ttft_ms": 500, "itl_ms": None, "e2e_ms": 9000}),
             {"workload": {"file": "w.yaml"}}, workload_spec=SPEC)  # fmt: skip
    a = _aiperf(ex)
    assert (a.concurrency, a.concurrency_ramp_duration, a.request_rate) == (32, 5.0, None)
    assert (a.request_count, a.warmup_request_count, a.random_seed) == (2000, 100, 7)
    assert a.isl == 1024
    assert a.isl_stddev == pytest.approx(1024 * (2.718281828**0.25 - 1) ** 0.5, rel=1e-3)
    assert (a.osl, a.osl_stddev) == (256, pytest.approx(256 / 12**0.5, rel=1e-3))
    assert a.extra_inputs == ["ignore_eos:true"]
    assert (a.num_prefix_prompts, a.prefix_prompt_length) == (8, 512)
    assert (a.session_turns_mean, a.session_turn_delay_mean) == (3, 1500.0)
    assert a.goodput == {"time_to_first_token": 500.0, "request_latency": 9000.0}
    assert a.input_file is None


def test_aiperf_concurrency_level_overrides_the_spec() -> None:
    study = {"workload": {"file": "w.yaml"}, "load": {"mode": "sweep", "axis": "concurrency"}}
    a = _aiperf(run(config(), study, workload_spec=SPEC, metrics={"load_level": 96.0}))
    assert a.concurrency == 96


@pytest.mark.parametrize(
    ("process", "expected"),
    [("poisson", ("poisson", None)), ("constant", ("constant", None)), ("gamma", ("gamma", 0.25))],
)
def test_aiperf_open_loop_rate(process: str, expected: tuple[str, float | None]) -> None:
    arrival = {"process": process, "rate_rps": 8.0, **({"cv": 2.0} if process == "gamma" else {})}
    spec = {**SPEC, "arrival": arrival, "input_tokens": {"dist": "fixed", "value": 700}}
    study = {"workload": {"file": "w.yaml"}, "load": {"mode": "capacity", "axis": "rate_rps"}}
    a = _aiperf(run(config(), study, workload_spec=spec, metrics={"load_level": 12.5}))
    assert (a.request_rate, a.concurrency) == (12.5, None)
    assert (a.arrival_pattern, a.arrival_smoothness) == expected
    assert (a.isl, a.isl_stddev) == (700, 0.0)
    fixed = _aiperf(run(config(), {"workload": {"file": "w.yaml"}}, workload_spec=spec))
    assert fixed.request_rate == 8.0


def test_aiperf_handles_missing_pieces() -> None:
    ex = run(config(), {"workload": {"file": "gone.yaml"}}, workload_error="No such file")
    a = _aiperf(ex)
    assert a.isl is None
    assert any("gone.yaml not readable (No such file)" in n for n in ex.aiperf.notes)
    empirical = {**SPEC, "input_tokens": {"dist": "empirical", "trace": TRACE}}
    ex = run(config(), {"workload": {"file": "w.yaml"}}, workload_spec=empirical)
    assert _aiperf(ex).isl is None
    assert any("input_tokens empirical: no AIPerf equivalent" in n for n in ex.aiperf.notes)
    ex = run(config(slo={"ttft_ms": None, "itl_ms": None}), {}, metrics={"load_level": 4.0})
    a = _aiperf(ex)
    assert (a.goodput, a.concurrency) == (None, None)
    assert any("stores no workload" in n for n in ex.aiperf.notes)
    ex = run(config(), {"workload": {"trace": TRACE}, "load": {"mode": "capacity"}})
    assert any("no load_level" in n for n in ex.aiperf.notes)


def test_infeasible_trial_still_exports() -> None:
    ex = run(config(), feasible=False, reason="SLO violated: time_to_first_token.p90 <= 2000")
    text = ex.to_text()
    assert "INFEASIBLE: SLO violated" in text.splitlines()[0]
    assert ex.to_dict()["feasible"] is False
    assert ex.engine.commands


def test_text_and_json_forms_agree() -> None:
    ex = run(config(backend="trtllm", workers=2), {"workload": {"trace": TRACE}})
    d = ex.to_dict()
    assert set(d) == {"header", "feasible", "checkpoint", "engine", "router", "pools", "planner",
                      "trtllm_yaml", "trtllm_yaml_path", "pool_yamls", "aiperf",
                      "capacity_check", "files"}  # fmt: skip
    text = ex.to_text()
    for part in ("engine", "router", "aiperf"):
        for c in d[part]["commands"]:
            assert shlex.split(c["command"])[len(c["env"]) :] == c["argv"]
    assert all(line.startswith("#") or line.strip() for line in text.splitlines() if line)
    assert text.count("trtllm-serve ") == 2


def test_bad_config_is_a_one_line_error() -> None:
    with pytest.raises(DynosimError, match=r"trial #4 has no exportable configuration: tp"):
        run({"model": MODEL, "gpu": "h200_sxm", "tp": 3})


PARSERS: Sequence[tuple[Callable[[], Parser], list[str]]] = [
    (vllm_parser, ["serve", MODEL, "--max-num-seq", "8"]),
    (vllm_parser, ["serve", MODEL, "--max-num-seqs", "8.0"]),
    (sglang_parser, ["--model-path", MODEL, "--disable-radix-cache", "true"]),
    (trtllm_parser, [MODEL, "--max-batch-size", "8"]),
    (aiperf_parser, ["profile", "--model", MODEL, "--goodput", "ttft:5"]),
]


@pytest.mark.parametrize(("factory", "argv"), PARSERS)
def test_mirrored_parsers_reject_misspellings_and_bad_types(
    factory: Callable[[], Parser], argv: list[str]
) -> None:
    with pytest.raises(ParseError):
        factory().parse_args(argv)


@pytest.mark.parametrize(
    ("spec_arrival", "flag", "value"),
    [
        ({"process": "closed_loop", "concurrency": 8}, "concurrency", 40),
        ({"process": "poisson", "rate_rps": 2.0}, "request_rate", 40.0),
    ],
)
def test_axis_follows_the_workload_as_search_load_stores_it(
    spec_arrival: dict[str, Any], flag: str, value: float
) -> None:
    load = {"mode": "capacity", "levels": [], "tolerance": 0.05}  # LoadSpec.to_dict(): no axis
    spec = {**SPEC, "arrival": spec_arrival}
    ex = run(config(), {"workload": {"file": "w.yaml"}, "load": load}, workload_spec=spec,
             metrics={"load_level": 40.0})  # fmt: skip
    assert getattr(_aiperf(ex), flag) == value
    trace = _aiperf(run(config(), {"workload": {"trace": TRACE}, "load": load},
                        metrics={"load_level": 6.0}))  # fmt: skip
    assert (trace.fixed_schedule, trace.synthesis_speedup_ratio) == (True, 6.0)


def test_workload_file_naming_a_trace_replays_the_trace() -> None:
    spec = {"trace": "traces/t.jsonl", "speedup": 2.0, "max_requests": 50}
    study = {"workload": {"file": "/exp/w.yaml"}, "load": {"mode": "sweep"}}
    a = _aiperf(run(config(), study, workload_spec=spec, metrics={"load_level": 5.0}))
    assert (a.input_file, a.fixed_schedule) == ("/exp/traces/t.jsonl", True)
    assert (a.synthesis_speedup_ratio, a.request_count, a.isl) == (5.0, 50, None)
