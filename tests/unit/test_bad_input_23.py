"""Issue 23: bounds checked before any work, and every parser validating at the edge.

Measurement files (size and row bounds, header, cells, each point's figures), the projected work
of a replay, Hugging Face configs, load sections, planner intervals and KV links.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dynosim.config import DeploymentConfig
from dynosim.errors import ConfigError, DynosimError, WorkloadError
from dynosim.perf.model_config import MAX_CONFIG_INT, load_config_file, parse_config
from dynosim.validation import measurements
from dynosim.validation.measurements import check_replay, read_measurements
from dynosim.workload.limits import MAX_CLIENTS, MAX_REPLAY_TOKENS, MAX_ROUNDS
from search.study.load import LoadSpec

HEADER = "model,gpu,backend,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"
ROW = "meta-llama/Llama-3.1-8B-Instruct,h200_sxm,vllm,1,100,10,4,20,5\n"
CONTEXT = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", "backend": "vllm"}


def _refused(path: Path, *parts: str, context: dict[str, Any] | None = None) -> None:
    with pytest.raises(WorkloadError) as exc:
        read_measurements(path, context)
    message = str(exc.value)
    assert "\n" not in message
    for part in parts:
        assert part in message, message


# ------------------------------------------------------------------------------ CSV files
def test_a_valid_row_reads_as_written(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text(HEADER + ROW + "\n")  # a trailing blank line is no row
    [m] = read_measurements(f)
    assert (m.tp, m.isl, m.osl, m.concurrency, m.ttft_ms, m.tpot_ms) == (1, 100, 10, 4, 20, 5)
    assert m.where == f"{f}:2"


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (HEADER, ["rows: none"]),
        ("", ["unknown measurement format"]),
        (HEADER + ROW.rstrip() + ",7\n", [":2: got 10 cells", "(9)"]),
        (HEADER + ROW.rsplit(",", 1)[0] + "\n", [":2: got 8 cells"]),
        (HEADER.rstrip() + ",tp\n" + ROW.rstrip() + ",2\n", [":1: tp: a column named twice"]),
        (HEADER + ROW.replace(",4,20,5", ",0,20,5"), [":2: concurrency: got '0'"]),
        (HEADER + ROW.replace(",4,20,5", ",-3,20,5"), [":2: concurrency: got '-3'"]),
        (HEADER + ROW.replace(",4,20,5", ",inf,20,5"), [":2: concurrency: got 'inf'"]),
        (HEADER + ROW.replace(",4,20,5", f",{MAX_CLIENTS + 1},20,5"), ["at most 65,536 clients"]),
        (HEADER + ROW.replace(",4,20,5", "," + "9" * 5000 + ",20,5"), [":2: concurrency: got '9"]),
        (HEADER + ROW.replace(",4,20,5", ",4,0,5"), [":2: ttft_ms: got 0.0"]),
        (HEADER + ROW.replace(",4,20,5", ",4,nan,5"), [":2: ttft_ms: got 'nan'"]),
        (HEADER + ROW.replace(",4,20,5", ",4,20,0"), [":2: tpot_ms: got 0.0", "osl 1"]),
        (HEADER + ROW.replace(",100,10,", ",1000000000,10,"), [":2: isl: got 1000000000"]),
        (HEADER + "x" * 200_000 + "\n", [":2: malformed CSV: field larger than field limit"]),
    ],
)
def test_bad_csv_files_are_refused_naming_file_line_and_field(
    tmp_path: Path, text: str, parts: list[str]
) -> None:
    f = tmp_path / "m.csv"
    f.write_text(text)
    _refused(f, str(f), *parts)


def test_a_file_beyond_the_size_bound_is_refused_before_reading(tmp_path: Path) -> None:
    f = tmp_path / "holes.csv"
    f.write_text(HEADER + ROW)
    with f.open("r+b") as fh:
        fh.truncate(2 << 30)  # a sparse 2 GiB file: mostly holes
    _refused(f, "size: got 2,147,483,648 bytes", "at most 268,435,456 bytes")


def test_the_row_bound_is_checked_while_streaming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(measurements, "MAX_MEASUREMENT_ROWS", 2)
    f = tmp_path / "m.csv"
    f.write_text(HEADER + ROW * 2)
    assert len(read_measurements(f)) == 2
    f.write_text(HEADER + ROW * 3)
    _refused(f, f"{f}:4: rows: more than 2")


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    fifo = tmp_path / "m.csv"
    os.mkfifo(fifo)  # opening it would block until a writer comes
    _refused(fifo, "not a regular file")
    _refused(tmp_path, "not a regular file")


def test_hf_config_files_are_bounded_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "config.json"
    big.write_text("{}")
    with big.open("r+b") as fh:
        fh.truncate(2 << 30)
    with pytest.raises(ConfigError, match=r"at most 16,777,216 bytes \(2,147,483,648 bytes\)"):
        load_config_file(str(big))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"\(not a file\)"):
        load_config_file(str(fifo))


def test_binary_bytes_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_bytes(b"\xff\xfe\x00garbage\n")
    _refused(f, "not UTF-8")


# ------------------------------------------------------------------------------ tool files
AIPERF: dict[str, Any] = {
    "time_to_first_token": {"avg": 20.0},
    "inter_token_latency": {"avg": 5.0},
    "input_sequence_length": {"avg": 100.0},
    "output_sequence_length": {"avg": 10.0},
    "input_config": {"loadgen": {"concurrency": 4}},
}


@pytest.mark.parametrize(
    ("concurrency", "part"),
    [(0, "concurrency: got 0"), (-4, "concurrency: got -4"), (2.5, "concurrency: got 2.5"),
     ("four", "concurrency: got 'four'"), (10**8, "concurrency: got 100000000")],
)  # fmt: skip
def test_aiperf_concurrency_is_checked_not_clamped(
    tmp_path: Path, concurrency: object, part: str
) -> None:
    data = {**AIPERF, "input_config": {"loadgen": {"concurrency": concurrency}}}
    f = tmp_path / "a.json"
    f.write_text(json.dumps(data))
    _refused(f, part, context=CONTEXT)


def test_vllm_json_infinities_and_huge_integers_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "v.json"
    base = ('{"completed": %s, "max_concurrency": %s, "total_input_tokens": 100, '
            '"total_output_tokens": 10, "mean_ttft_ms": %s, "mean_tpot_ms": 5}')  # fmt: skip
    f.write_text(base % ("1", "Infinity", "20"))
    _refused(f, "concurrency: got inf", context=CONTEXT)
    f.write_text(base % ("1" + "0" * 400, "4", "20"))
    _refused(f, "completed: got", context=CONTEXT)
    f.write_text(base % ("1", "4", "0"))
    _refused(f, "ttft_ms: got 0.0", context=CONTEXT)
    f.write_text(base % ("1", "4", "20"))
    [m] = read_measurements(f, CONTEXT)
    assert (m.concurrency, m.isl, m.osl, m.ttft_ms) == (4, 100, 10, 20.0)


# ------------------------------------------------------------------------------ replay work
def test_the_projected_replay_work_is_bounded(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text(HEADER + ROW.replace(",100,10,4,", ",10000,10000,60000,"))
    rows = read_measurements(f)
    assert 60_000 * 1 * 20_000 <= MAX_REPLAY_TOKENS < 60_000 * 2 * 20_000
    check_replay(rows, 1)
    with pytest.raises(WorkloadError, match="= 2,400,000,000 tokens; allowed: at most"):
        check_replay(rows, 2)
    for rounds in (0, MAX_ROUNDS + 1):
        with pytest.raises(ConfigError, match="--rounds"):
            check_replay(rows[:0], rounds)


# ------------------------------------------------------------------------------ HF configs
LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 128256,
}  # fmt: skip
DEEPSEEK: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
    "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
}  # fmt: skip


@pytest.mark.parametrize(
    ("base", "key", "value", "part"),
    [
        (LLAMA, "num_hidden_layers", "32", "num_hidden_layers: got '32'"),
        (LLAMA, "num_hidden_layers", 10**5000, "num_hidden_layers: got <an integer"),
        (LLAMA, "hidden_size", MAX_CONFIG_INT + 1, "hidden_size: got 16777217"),
        (LLAMA, "vocab_size", 0, "vocab_size: got 0"),
        (LLAMA, "vocab_size", 128256.0, "vocab_size: got 128256.0"),
        (LLAMA, "tie_word_embeddings", "yes", "tie_word_embeddings: got 'yes'"),
        (DEEPSEEK, "first_k_dense_replace", 99, "first_k_dense_replace: got 99"),
        (DEEPSEEK, "first_k_dense_replace", "3", "first_k_dense_replace: got '3'"),
        (DEEPSEEK, "q_lora_rank", -5, "q_lora_rank: got -5"),
        (DEEPSEEK, "kv_lora_rank", -1, "kv_lora_rank: got -1"),
        (DEEPSEEK, "n_shared_experts", "one", "n_shared_experts: got 'one'"),
        (DEEPSEEK, "n_shared_experts", 10**30, "n_shared_experts: got 10000"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_hf_config_fields_are_typed_and_bounded(
    base: dict[str, Any], key: str, value: object, part: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({**base, key: value}, name="cfg.json", aic_name=None)
    assert "\n" not in str(exc.value)
    assert str(exc.value).startswith("model cfg.json: "), str(exc.value)
    assert part in str(exc.value), str(exc.value)


def test_valid_hf_configs_still_parse() -> None:
    llama = parse_config(LLAMA, name="l", aic_name=None)
    assert (llama.layers, llama.head_dim, llama.tied_embeddings) == (32, 128, False)
    ds = parse_config({**DEEPSEEK, "q_lora_rank": None}, name="d", aic_name=None)
    assert (ds.dense_layers, ds.q_lora_rank, ds.shared_intermediate) == (3, 0, 2048)


# ------------------------------------------------------------------------------ load, planner
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"mode": "capacity", "tolerance": 1e-17}, "load.tolerance"),
        ({"mode": "capacity", "start": 1e-299}, "load.start"),
        ({"mode": "capacity", "max": 1e300}, "load.max"),
        ({"mode": "sweep", "levels": list(range(1, 1002))}, "load.levels"),
        ({"mode": "sweep", "levels": [1, 10**7]}, "load.levels[1]"),
    ],
)
def test_load_levels_and_tolerance_are_bounded(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        LoadSpec.from_dict(raw)
    assert str(exc.value).startswith(f"{field}: got"), str(exc.value)


def test_the_bounds_themselves_are_allowed() -> None:
    spec = LoadSpec.from_dict({"mode": "sweep", "levels": [0.001, 100_000]})
    assert spec.levels == (0.001, 100_000.0)
    assert LoadSpec.from_dict({"mode": "capacity", "tolerance": 0.001}).tolerance == 0.001


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"planner": {"adjustment_interval_s": 1e-9}}, "planner.adjustment_interval_s"),
        ({"planner": {"metric_pulling_interval_s": 1e-9}}, "planner.metric_pulling_interval_s"),
        ({"kv_transfer": {"gbps": 1e-300}}, "kv_transfer.gbps"),
    ],
)
def test_recurring_events_and_links_are_bounded(section: dict[str, Any], field: str) -> None:
    data = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h200_sxm", **section}
    with pytest.raises(DynosimError) as exc:
        DeploymentConfig.from_dict(data)
    assert str(exc.value).startswith(f"{field}: got"), str(exc.value)
