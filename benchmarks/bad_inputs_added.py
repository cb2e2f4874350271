# ruff: noqa: E501  (the corpus is a table of cases, one a line)
"""The bad-input corpus's cases for what was added since issue 10 (issue 23).

Measurement files (plain CSV, silicon CSV, AIPerf JSON/CSV, vLLM bench JSON), ``validate`` and
``calibrate`` options, calibration profiles, Hugging Face ``config.json`` files, disaggregated
deployments, the planner, speculative decoding, load modes, timelines and ``export``/``report``
of a study whose workload file was edited after it ran. :func:`cases` takes the corpus module
(``benchmarks/bad_inputs.py``) for its :class:`Case` and helpers.
"""

from __future__ import annotations

import dataclasses
import json
from types import ModuleType
from typing import Any

PLAIN_HEADER = "model,gpu,backend,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
PLAIN_ROW = "meta-llama/Llama-3.1-8B-Instruct,h200_sxm,vllm,1,100,10,4,20,5\n"
SILICON_HEADER = "model_path,system,backend,mode,isl,osl,batch_size,tp_size,silicon_ttft_ms,silicon_tpot_ms,silicon_data_source\n"
DISAGG_HEADER = "model_path,system,backend,mode,isl,osl,batch_size,tp_size,silicon_ttft_ms,silicon_tpot_ms,silicon_data_source,precision,gemm_quant_mode,prefill_num_workers,prefill_tp_size,prefill_batch_size,decode_num_workers,decode_tp_size,decode_batch_size\n"
DISAGG_ROW = (
    "meta-llama/Llama-3.1-8B-Instruct,h200_sxm,vllm,disagg,100,10,4,1,20,5,x,bf16,,1,1,1,1,1,4\n"
)
SILICON_ROW = "meta-llama/Llama-3.1-8B-Instruct,h200_sxm,vllm,agg,100,10,4,1,20,5,x\n"
CONTEXT = "model: meta-llama/Llama-3.1-8B-Instruct\ngpu: h200_sxm\nbackend: vllm\ntp: 1\n"
LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
}
DEEPSEEK: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
}
AIPERF: dict[str, Any] = {
    "time_to_first_token": {"unit": "ms", "avg": 20.0},
    "inter_token_latency": {"unit": "ms", "avg": 5.0},
    "input_sequence_length": {"unit": "tokens", "avg": 100.0},
    "output_sequence_length": {"unit": "tokens", "avg": 10.0},
    "input_config": {
        "loadgen": {"concurrency": 4},
        "endpoint": {"model_names": ["meta-llama/Llama-3.1-8B-Instruct"]},
    },
}
VLLM: dict[str, Any] = {
    "model_id": "meta-llama/Llama-3.1-8B-Instruct",
    "completed": 16,
    "max_concurrency": 4,
    "total_input_tokens": 1600,
    "total_output_tokens": 160,
    "mean_ttft_ms": 20.0,
    "mean_tpot_ms": 5.0,
}
AIPERF_CSV = "Metric,avg,min,max\nTime to First Token (ms),20,10,30\nInter Token Latency (ms),5,4,6\nInput Sequence Length (tokens),100,100,100\nOutput Sequence Length (tokens),10,10,10\n"
DISAGG = """\
model: meta-llama/Llama-3.1-8B-Instruct
gpu: h200_sxm
backend: vllm
mode: disagg
prefill: {tp: 1, workers: 1}
decode: {tp: 1, workers: 1}
slo: {ttft_ms: 2000, itl_ms: 50}
"""


def _edit(d: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(d))
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node[p]
    node[last] = value
    return out


def _dump(d: dict[str, Any]) -> str:
    return json.dumps(d)


def cases(b: ModuleType) -> list[Any]:
    """The cases (``b``: the corpus module, for ``Case`` and its helpers)."""
    case = b.Case

    def validate(name: str, text: str, *extra: str, file: str = "m.csv") -> Any:
        return case(name, ("validate", file, "--timing", "roofline", *extra), {file: text})

    def calibrate(name: str, text: str, *extra: str, file: str = "m.csv") -> Any:
        args = ("calibrate", file, "--out", "p.yaml", "--timing", "roofline", "--no-verify", *extra)
        return case(name, args, {file: text})

    def plain(name: str, row: str, *extra: str) -> Any:
        return validate(name, PLAIN_HEADER + row, *extra)

    def hf(name: str, cfg: dict[str, Any] | str, *extra: str) -> Any:
        text = cfg if isinstance(cfg, str) else _dump(cfg)
        dep = b.DEPLOYMENT.replace(
            "model: meta-llama/Llama-3.1-8B-Instruct", "model: ./config.json"
        )
        return b._sim(name, dep, *extra, **{"config.json": text})

    def disagg(name: str, old: str, new: str) -> Any:
        assert old in DISAGG, old
        return b._sim(name, DISAGG.replace(old, new))

    def load(name: str, section: str, workload: str | None = None) -> Any:
        study = b.STUDY.replace(
            "budget: {max_trials: 2}", f"budget: {{max_trials: 2}}\nload: {section}"
        )
        files = {} if workload is None else {"workload.yaml": workload}
        return b._tune(name, study, **files)

    closed = "requests: 8\narrival: {process: closed_loop, concurrency: 2}\ninput_tokens: {dist: fixed, value: 100}\noutput_tokens: {dist: fixed, value: 10}\n"
    tool_case = _tool_case(case)
    return [
        # controls
        case(
            "control: valid validate (plain CSV)",
            ("validate", "m.csv", "--timing", "roofline"),
            {"m.csv": PLAIN_HEADER + PLAIN_ROW},
            ok=True,
        ),
        case(
            "control: valid validate (vLLM bench JSON)",
            ("validate", "m.json", "--timing", "roofline", "--deployment", "ctx.yaml"),
            {"m.json": _dump(VLLM), "ctx.yaml": CONTEXT},
            ok=True,
        ),
        case(
            "control: valid HF config.json",
            ("simulate", "deployment.yaml", "--workload", "workload.yaml"),
            {
                "deployment.yaml": b.DEPLOYMENT.replace(
                    "model: meta-llama/Llama-3.1-8B-Instruct", "model: ./config.json"
                ),
                "config.json": _dump(LLAMA),
            },
            ok=True,
        ),
        # plain CSV
        validate("validate header-only plain CSV", PLAIN_HEADER),
        validate("validate empty file", ""),
        plain("validate row with an extra column", PLAIN_ROW.rstrip("\n") + ",7\n"),
        validate(
            "validate duplicated column",
            PLAIN_HEADER.rstrip("\n") + ",tp\n" + PLAIN_ROW.rstrip("\n") + ",2\n",
        ),
        plain("validate concurrency 0", PLAIN_ROW.replace(",4,20,5", ",0,20,5")),
        plain("validate concurrency -3", PLAIN_ROW.replace(",4,20,5", ",-3,20,5")),
        plain("validate concurrency inf", PLAIN_ROW.replace(",4,20,5", ",inf,20,5")),
        plain("validate concurrency nan", PLAIN_ROW.replace(",4,20,5", ",nan,20,5")),
        plain("validate concurrency 10**8", PLAIN_ROW.replace(",4,20,5", ",100000000,20,5")),
        plain(
            "validate concurrency 5000 digits",
            PLAIN_ROW.replace(",4,20,5", "," + "9" * 5000 + ",20,5"),
        ),
        plain("validate ttft 0", PLAIN_ROW.replace(",4,20,5", ",4,0,5")),
        plain("validate ttft nan", PLAIN_ROW.replace(",4,20,5", ",4,nan,5")),
        plain("validate ttft inf", PLAIN_ROW.replace(",4,20,5", ",4,inf,5")),
        plain("validate tpot -1", PLAIN_ROW.replace(",4,20,5", ",4,20,-1")),
        plain("validate isl 10**9", PLAIN_ROW.replace(",100,10,4", ",1000000000,10,4")),
        plain("validate osl 10**9", PLAIN_ROW.replace(",100,10,4", ",100,1000000000,4")),
        plain("validate tp 0", PLAIN_ROW.replace("vllm,1,", "vllm,0,")),
        plain("validate tp 10**6", PLAIN_ROW.replace("vllm,1,", "vllm,1000000,")),
        validate("validate binary bytes", "\x00\xff\xfe garbage \x01\n"),
        plain("validate concurrency 10**5", PLAIN_ROW.replace(",4,20,5", ",100000,20,5")),
        validate(
            "validate 60k clients x 3000 rounds",
            PLAIN_HEADER + PLAIN_ROW.replace(",4,20,5", ",60000,20,5"),
            "--rounds",
            "900",
        ),
        validate("validate --rounds 3000000", PLAIN_HEADER + PLAIN_ROW, "--rounds", "3000000"),
        validate("validate --rounds 0", PLAIN_HEADER + PLAIN_ROW, "--rounds", "0"),
        validate("validate --max-rows 0", PLAIN_HEADER + PLAIN_ROW, "--max-rows", "0"),
        validate(
            "validate --concurrency 10**8", PLAIN_HEADER + PLAIN_ROW, "--concurrency", "100000000"
        ),
        case(
            "validate sparse 2 GB file",
            ("validate", "m.csv", "--timing", "roofline"),
            {"m.csv": PLAIN_HEADER + PLAIN_ROW},
            sparse={"m.csv": 2 << 30},
        ),
        # silicon CSV
        validate(
            "silicon batch_size 10**8",
            SILICON_HEADER + SILICON_ROW.replace(",4,1,", ",100000000,1,"),
        ),
        validate("silicon ttft inf", SILICON_HEADER + SILICON_ROW.replace(",20,5,", ",inf,5,")),
        validate("silicon header only", SILICON_HEADER),
        case(
            "control: valid validate (silicon disagg row)",
            ("validate", "m.csv", "--timing", "roofline"),
            {"m.csv": DISAGG_HEADER + DISAGG_ROW},
            ok=True,
        ),
        validate(
            "silicon disagg 65M clients",
            DISAGG_HEADER + DISAGG_ROW.replace(",1,1,1,1,1,4", ",1,1,1,65000,1,1000"),
        ),
        validate(
            "silicon disagg decode workers inf",
            DISAGG_HEADER + DISAGG_ROW.replace(",1,1,1,1,1,4", ",1,1,1,inf,1,4"),
        ),
        # AIPerf / vLLM bench
        tool_case(
            "aiperf json concurrency 0",
            "m.json",
            _dump(_edit(AIPERF, "input_config.loadgen.concurrency", 0)),
        ),
        tool_case(
            "aiperf json concurrency inf",
            "m.json",
            _dump(_edit(AIPERF, "input_config.loadgen.concurrency", 1e999)).replace(
                "Infinity", "1e999"
            ),
        ),
        tool_case(
            "aiperf json concurrency -4",
            "m.json",
            _dump(_edit(AIPERF, "input_config.loadgen.concurrency", -4)),
        ),
        tool_case(
            "aiperf json concurrency string",
            "m.json",
            _dump(_edit(AIPERF, "input_config.loadgen.concurrency", "four")),
        ),
        tool_case(
            "aiperf json concurrency 10**8",
            "m.json",
            _dump(_edit(AIPERF, "input_config.loadgen.concurrency", 10**8)),
        ),
        tool_case(
            "aiperf json ttft 0", "m.json", _dump(_edit(AIPERF, "time_to_first_token.avg", 0))
        ),
        tool_case(
            "aiperf json ttft NaN",
            "m.json",
            _dump(_edit(AIPERF, "time_to_first_token.avg", float("nan"))),
        ),
        tool_case(
            "aiperf json isl 0.2", "m.json", _dump(_edit(AIPERF, "input_sequence_length.avg", 0.2))
        ),
        tool_case(
            "aiperf csv header only",
            "m.csv",
            "Metric,avg,min,max\nTime to First Token (ms)\n",
            "--concurrency",
            "4",
        ),
        tool_case(
            "aiperf csv ttft inf",
            "m.csv",
            AIPERF_CSV.replace(",20,10,30", ",inf,10,30"),
            "--concurrency",
            "4",
        ),
        tool_case("aiperf csv concurrency flag 0", "m.csv", AIPERF_CSV, "--concurrency", "0"),
        tool_case("vllm json concurrency 0", "m.json", _dump(_edit(VLLM, "max_concurrency", 0))),
        tool_case(
            "vllm json concurrency inf",
            "m.json",
            _dump(VLLM).replace('"max_concurrency": 4', '"max_concurrency": Infinity'),
        ),
        tool_case(
            "vllm json concurrency 65M", "m.json", _dump(_edit(VLLM, "max_concurrency", 65_000_000))
        ),
        tool_case("vllm json ttft 0", "m.json", _dump(_edit(VLLM, "mean_ttft_ms", 0))),
        tool_case(
            "vllm json completed 10**400",
            "m.json",
            _dump(VLLM).replace('"completed": 16', '"completed": 1' + "0" * 400),
        ),
        tool_case(
            "vllm json tokens huge", "m.json", _dump(_edit(VLLM, "total_input_tokens", 10**15))
        ),
        tool_case("vllm json top-level list", "m.json", "[1, 2]"),
        # calibrate
        calibrate(
            "calibrate every row refused", PLAIN_HEADER + PLAIN_ROW.replace("vllm,1,", "vllm,3,")
        ),
        calibrate("calibrate header only", PLAIN_HEADER),
        calibrate(
            "calibrate --factor-prior inf", PLAIN_HEADER + PLAIN_ROW, "--factor-prior", "inf"
        ),
        calibrate(
            "calibrate --factor-prior 1e308", PLAIN_HEADER + PLAIN_ROW, "--factor-prior", "1e308"
        ),
        calibrate("calibrate --ttft-weight inf", PLAIN_HEADER + PLAIN_ROW, "--ttft-weight", "inf"),
        calibrate(
            "calibrate --ttft-weight 1e308", PLAIN_HEADER + PLAIN_ROW, "--ttft-weight", "1e308"
        ),
        calibrate("calibrate --ttft-weight nan", PLAIN_HEADER + PLAIN_ROW, "--ttft-weight", "nan"),
        calibrate("calibrate --rounds 3000000", PLAIN_HEADER + PLAIN_ROW, "--rounds", "3000000"),
        calibrate(
            "calibrate rows of 10**8 clients",
            PLAIN_HEADER + PLAIN_ROW.replace(",4,20,5", ",100000000,20,5"),
        ),
        # calibration profiles
        b._sim(
            "profile not a mapping",
            b.DEPLOYMENT + "calibration: prof.yaml\n",
            **{"prof.yaml": "[1, 2]\n"},
        ),
        b._sim(
            "profile 5000-digit integer",
            b.DEPLOYMENT + "calibration: prof.yaml\n",
            **{"prof.yaml": "backends:\n  vllm:\n    step: {base_us: " + "9" * 5000 + "}\n"},
        ),
        b._sim(
            "profile step inf",
            b.DEPLOYMENT + "calibration: prof.yaml\n",
            **{"prof.yaml": "backends:\n  vllm:\n    step: {base_us: .inf}\n"},
        ),
        b._sim(
            "profile binary",
            b.DEPLOYMENT + "calibration: prof.yaml\n",
            **{"prof.yaml": "\udcff\udcfe\x00\n"},
        ),
        b._sim(
            "profile base_us 10**30",
            b.DEPLOYMENT + "calibration: prof.yaml\n",
            **{
                "prof.yaml": "backends:\n  vllm:\n    step: {base_us: 1000000000000000000000000000000}\n"
            },
        ),
        b._sim(
            "profile prefill factor 1e308",
            b.DEPLOYMENT + "calibration: prof.yaml\n",
            **{"prof.yaml": "backends:\n  vllm:\n    step: {prefill: 1.0e+308}\n"},
        ),
        b._sim(
            "profile host request_us -1",
            b.DEPLOYMENT + "calibration: prof.yaml\n",
            **{"prof.yaml": "backends:\n  vllm:\n    host: {request_us: -1}\n"},
        ),
        b._sim(
            "profile sigma string",
            b.DEPLOYMENT + "calibration: prof.yaml\n",
            **{"prof.yaml": "backends:\n  vllm:\n    sigma: {ttft: wide}\n"},
        ),
        # Hugging Face config.json
        hf("hf layers string", _edit(LLAMA, "num_hidden_layers", "32")),
        hf("hf layers 5000 digits", _edit(LLAMA, "num_hidden_layers", int("9" * 1000))),
        hf("hf hidden 10**12", _edit(LLAMA, "hidden_size", 10**12)),
        hf("hf vocab 0", _edit(LLAMA, "vocab_size", 0)),
        hf("hf vocab float", _edit(LLAMA, "vocab_size", 128256.5)),
        hf("hf heads not dividing hidden, no head_dim", _edit(LLAMA, "num_attention_heads", 7)),
        hf("hf kv heads more than heads", _edit(LLAMA, "num_key_value_heads", 64)),
        hf("hf tie_word_embeddings string", _edit(LLAMA, "tie_word_embeddings", "yes")),
        hf("hf not an object", "[1, 2, 3]"),
        hf("hf binary", "\udcff\udcfe\x00"),
        hf("hf deepseek dense layers above layers", _edit(DEEPSEEK, "first_k_dense_replace", 99)),
        hf("hf deepseek q_lora_rank -5", _edit(DEEPSEEK, "q_lora_rank", -5)),
        hf("hf deepseek q_lora_rank string", _edit(DEEPSEEK, "q_lora_rank", "1536")),
        hf("hf deepseek kv_lora_rank -1", _edit(DEEPSEEK, "kv_lora_rank", -1)),
        hf("hf deepseek shared experts 10**30", _edit(DEEPSEEK, "n_shared_experts", 10**30)),
        hf("hf deepseek shared experts string", _edit(DEEPSEEK, "n_shared_experts", "one")),
        hf("hf deepseek dense layers string", _edit(DEEPSEEK, "first_k_dense_replace", "3")),
        hf("hf deepseek experts 10**9", _edit(DEEPSEEK, "n_routed_experts", 10**9)),
        dataclasses.replace(
            hf("hf config.json sparse 2 GB", LLAMA), sparse={"config.json": 2 << 30}
        ),
        # disaggregated
        disagg("disagg kv_transfer gbps 1e-300", "slo:", "kv_transfer: {gbps: 1.0e-300}\nslo:"),
        disagg("disagg kv_transfer gbps 1e-9", "slo:", "kv_transfer: {gbps: 1.0e-9}\nslo:"),
        disagg(
            "disagg kv_transfer latency 1e300", "slo:", "kv_transfer: {latency_us: 1.0e+300}\nslo:"
        ),
        disagg(
            "disagg decode workers 10**6",
            "decode: {tp: 1, workers: 1}",
            "decode: {tp: 1, workers: 1000000}",
        ),
        disagg("disagg prefill tp 3", "prefill: {tp: 1", "prefill: {tp: 3"),
        # planner
        b._dep(
            "planner adjustment_interval_s 1 ns",
            "tp: 1",
            "tp: 1\nplanner: {adjustment_interval_s: 1.0e-9, max_workers: 2}",
        ),
        b._dep(
            "planner metric_pulling_interval_s 1 ns",
            "tp: 1",
            "tp: 1\nplanner: {metric_pulling_interval_s: 1.0e-9, max_workers: 2}",
        ),
        b._dep(
            "planner startup 1e300",
            "tp: 1",
            "tp: 1\nplanner: {startup_s: 1.0e+300, max_workers: 2}",
        ),
        # timeline
        b._sim(
            "simulate --timeline-interval 1 ns",
            b.DEPLOYMENT,
            "--workload",
            "workload.yaml",
            "--timeline",
            "t.html",
            "--timeline-interval",
            "1e-9",
        ),
        b._sim(
            "simulate --timeline-interval inf",
            b.DEPLOYMENT,
            "--workload",
            "workload.yaml",
            "--timeline",
            "t.html",
            "--timeline-interval",
            "inf",
        ),
        b._sim("simulate --seed -1", b.DEPLOYMENT, "--workload", "workload.yaml", "--seed", "-1"),
        b._sim(
            "simulate --seed 2**64",
            b.DEPLOYMENT,
            "--workload",
            "workload.yaml",
            "--seed",
            str(2**64),
        ),
        # speculative
        b._dep(
            "speculative 671B draft on one GPU",
            "tp: 1",
            "tp: 1\nspeculative: {method: draft, draft_model: deepseek-ai/DeepSeek-V3, acceptance: 0.6}",
        ),
        # load modes
        load("load capacity tolerance 1e-17", "{mode: capacity, tolerance: 1.0e-17}"),
        load("load capacity start 1e-299", "{mode: capacity, start: 1.0e-299}"),
        load("load capacity max 1e300", "{mode: capacity, max: 1.0e+300}"),
        load(
            "load sweep 100000 levels",
            "{mode: sweep, levels: [" + ", ".join(str(i) for i in range(1, 100_001)) + "]}",
        ),
        load("load sweep level 10**7 clients", "{mode: sweep, levels: [1, 10000000]}", closed),
        load("load sweep level 1e-300", "{mode: sweep, levels: [1.0e-300, 1]}"),
        load("load capacity max_probes 10**6", "{mode: capacity, max_probes: 1000000}"),
        # export of a study whose workload was edited after it ran (report does not read it)
        case(
            "control: report after the workload file is broken",
            ("report", "corpus", "--storage", "study.journal", "--out", "rep"),
            {"study.yaml": b.STUDY},
            ok=True,
            setup=(("tune", "study.yaml", "--no-progress"),),
            after={"workload.yaml": "\udcff\udcfe\x00\x01"},
        ),
        *[
            case(
                f"{cmd} after workload edited: {what}",
                (cmd, "corpus", "--storage", "study.journal", *extra),
                {"study.yaml": b.STUDY},
                setup=(("tune", "study.yaml", "--no-progress"),),
                after={"workload.yaml": text},
            )
            for cmd, extra in (("export", ("--trial", "0")),)
            for what, text in (
                (
                    "gamma cv 0",
                    "requests: 5\narrival: {process: gamma, rate_rps: 2, cv: 0}\ninput_tokens: {dist: fixed, value: 100}\noutput_tokens: {dist: fixed, value: 10}\n",
                ),
                ("requests a string", b.WORKLOAD.replace("requests: 5", "requests: five")),
                ("binary bytes", "\udcff\udcfe\x00\x01"),
            )
        ],
    ]


def _tool_case(case: Any) -> Any:
    def make(name: str, file: str, text: str, *extra: str) -> Any:
        return case(
            name,
            ("validate", file, "--timing", "roofline", "--deployment", "ctx.yaml", *extra),
            {file: text, "ctx.yaml": CONTEXT},
        )

    return make
