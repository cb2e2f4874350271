"""Each InferenceX row replays with its own recipe's flags (dynosim.validation.recipes).

The worked examples are checked by hand against the recipes at the commits the table names
(``git show <commit>:<path>`` in SemiAnalysisAI/InferenceX).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import replace
from pathlib import Path

import pytest

from dynosim.perf.memory import kv_pool
from dynosim.validation.measurement import Measurement
from dynosim.validation.measurements import read_measurements
from dynosim.validation.recipes import RECIPES_CSV, recipe_flags
from dynosim.validation.silicon import silicon_csv
from dynosim.validation.validate import row_config


@functools.cache
def _rows() -> dict[str, Measurement]:
    ids = [r["id"] for r in csv.DictReader(silicon_csv().open(newline="", encoding="utf-8"))]
    rows = read_measurements(silicon_csv())
    assert len(ids) == len(rows)
    return dict(zip(ids, rows, strict=True))


def test_every_recipe_is_an_inferencex_row_that_builds() -> None:
    """Every table row is an aggregated InferenceX row of the file; each replays as a valid
    deployment or is refused with its reason (never an error of the table's making)."""
    with RECIPES_CSV.open(newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    rows = _rows()
    assert len(table) > 2000
    for r in table:
        m = rows[r["id"]]
        assert (m.client, m.mode) == ("inferencex", "agg")
        assert (m.recipe, m.concurrency) == (r["recipe"], int(r["conc"]))
        if m.refused is None:
            row_config(m, timing="roofline")
    twins = sum(1 for m in rows.values() if m.recipe and m.source.endswith("gap-analysis.csv"))
    assert twins == 106  # repeats of table rows, replayed as them (test_twins)
    assert sum(bool(m.recipe) for m in rows.values()) == len(table) + twins


def test_llama_70b_b200_vllm_recipe() -> None:
    """``benchmarks/70b_fp8_b200_docker.sh`` (removed 2025-10-29): ``kv-cache-dtype: fp8``,
    ``async-scheduling: true``, ``no-enable-prefix-caching``, ``max-num-batched-tokens: 8192``,
    ``--gpu-memory-utilization=0.9 --max-num-seqs=512``; vLLM's block size 16."""
    m = _rows()["2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c8_tp4_ep1_259"]
    assert m.recipe.startswith("benchmarks/70b_fp8_b200_docker.sh@")
    e = row_config(m).engine
    assert (e.max_num_batched_tokens, e.gpu_memory_utilization, e.max_num_seqs) == (8192, 0.9, 512)
    assert (e.block_size, e.enable_prefix_caching, e.async_scheduling) == (16, False, True)
    assert row_config(m).kv_dtype == "fp8"
    # compilation-config: '{"pass_config": {"enable_fi_allreduce_fusion": true, ...}}'
    assert e.allreduce_fusion is True


def test_llama_70b_b200_trtllm_recipe_waits_for_batches() -> None:
    """``benchmarks/70b_fp4_b200_trt_docker.sh`` at 1k/1k: ``batch_wait_max_tokens_ratio: 0.9``,
    ``batch_wait_timeout_iters: 20`` ("For 1k/1k, use batch_wait_max_tokens_ratio and
    batch_wait_timeout_iters will improve the performance") and ``--max_num_tokens 16384``."""
    m = _rows()["2026_04_06_llama_3_1_70b_b200_sxm_trtllm_fp4_agg_1024x1024_c8_tp2_ep1_257"]
    assert m.recipe.startswith("benchmarks/70b_fp4_b200_trt_docker.sh@")
    e = row_config(m).engine
    assert (e.batch_wait_timeout_iters, e.batch_wait_max_tokens_ratio) == (20, 0.9)
    assert e.max_num_batched_tokens == 16384


def test_deepseek_r1_b200_sglang_recipe() -> None:
    """``dsr1_fp8_b200.sh`` at TP 4 (8k/1k only): ``--max-running-requests 32
    --mem-fraction-static 0.95 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 8192
    --max-prefill-tokens 8192 --scheduler-recv-interval 10 --disable-radix-cache`` (TP 8 would
    pass 128, 0.82, 32768 and an interval of 30 at CONC >= 16)."""
    m = _rows()["2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_8192x1024_c16_tp4_0_ep1_0_297"]
    c = row_config(m)
    e = c.engine
    assert (e.max_num_seqs, e.gpu_memory_utilization) == (32, 0.95)
    assert (e.max_num_batched_tokens, e.max_prefill_tokens) == (8192, 8192)
    assert (e.scheduler_recv_interval, e.enable_prefix_caching) == (10, False)
    assert c.kv_dtype == "fp8"


def test_kimi_vllm_row_runs_as_its_command_line_asks() -> None:
    """AIConfigurator encodes this row as TP 4 x attention DP 4 with EP 16; the recipe
    (``kimik2.5_fp4_b200.sh``) passes ``--tensor-parallel-size=$TP`` and neither
    ``--data-parallel-size`` nor ``--enable-expert-parallel``: 4 GPUs of plain TP, 4 clients."""
    m = _rows()["kimik2_5_b200_vllm_fp4_agg_1024x8192_c4_cfg635"]
    assert (m.tp, m.ep, m.moe_tp, m.attention_dp, m.concurrency) == (4, 1, 4, 1, 4)
    assert row_config(m).engine.max_num_seqs == 4  # --max-num-seqs $CONC


def test_trtllm_rows_run_the_parallelism_their_recipe_passes() -> None:
    """``dsr1_fp8_b200_trt_slurm.sh@9596d23d7`` passes ``EP_SIZE="$TP"`` at every point (its
    rows record the sweep's ``ep 1``): 8 GPUs of attention TP 8 and experts EP 8.
    ``dsr1_fp4_b200_trt_slurm.sh`` there, TP 4 at 8k/1k above concurrency 32: ``EP_SIZE=$TP``,
    ``DP_ATTENTION=true`` (``enable_attention_dp: true``), ``MOE_BACKEND="CUTLASS"``."""
    m = _rows()["dsr1_b200_trtllm_fp8_agg_1024x1024_c16_cfg75"]
    assert m.recipe == "benchmarks/dsr1_fp8_b200_trt_slurm.sh@9596d23d7"
    assert (m.tp, m.ep, m.moe_tp, m.attention_dp, m.concurrency) == (8, 8, 1, 1, 16)
    m = _rows()["dsr1_b200_trtllm_fp4_agg_8192x1024_c64_cfg82"]
    assert (m.tp, m.ep, m.moe_tp, m.attention_dp, m.concurrency) == (1, 4, 1, 4, 64)
    c = row_config(m, timing="roofline")
    assert (c.tp, c.attention_dp, c.ep) == (1, 4, 4)
    with RECIPES_CSV.open(newline="", encoding="utf-8") as f:
        table = [r for r in csv.DictReader(f) if r["backend"] == "trtllm"]
    rows = _rows()
    resolved = [r for r in table if r["enable_attention_dp"]]
    assert len(resolved) == 488  # the dense 70B recipes write no extra options file
    for r in resolved:  # the same GPUs, split as the command line asks
        m = rows[r["id"]]
        assert m.tp * m.attention_dp == int(r["tp"]) == m.ep * m.moe_tp
        assert f"ep_size={m.ep}" == r["enable_expert_parallel"]
        assert (m.attention_dp > 1) == (r["enable_attention_dp"] == "true")


def test_trtllm_attention_dp_rows_balance_their_contexts_as_their_recipe_asks() -> None:
    """With attention DP, ``dsr1_fp8_b200_trt_slurm.sh@9596d23d7`` writes ``attention_dp_config:
    {batching_wait_iters: 0, enable_balance: true, timeout_iters: 60}``; ``gptoss_fp4_b200_trt.sh``
    writes ``enable_balance: true`` alone (TensorRT-LLM's defaults, 50 and 10). Every recipe of
    the table with attention DP balances; a recipe-less DeepSeek-R1 row with attention DP takes
    its family's (all DeepSeek-R1 TensorRT-LLM recipes with attention DP pass 60 and 0)."""
    rows = _rows()
    engine = row_config(rows["dsr1_b200_trtllm_fp4_agg_8192x1024_c64_cfg82"], "roofline").engine
    got = (engine.attention_dp_enable_balance, engine.attention_dp_timeout_iters,
           engine.attention_dp_batching_wait_iters)  # fmt: skip
    assert got == (True, 60, 0)
    gptoss = rows["2026_04_06_gpt_oss_120b_b200_sxm_trtllm_fp4_agg_1024x1024_c64_tp4_ep4_1904"]
    assert gptoss.engine["attention_dp_enable_balance"] is True
    assert "attention_dp_timeout_iters" not in gptoss.engine
    lone = rows["2026_04_06_deepseek_r1_b200_sxm_trtllm_fp4_agg_8192x1024_c64_tp4_ep4_961"]
    assert lone.recipe == ""
    assert lone.engine["attention_dp_timeout_iters"] == 60
    with RECIPES_CSV.open(newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    dp = [r for r in table if r["enable_attention_dp"] == "true"]
    assert len(dp) == 87
    assert all(r["attention_dp_enable_balance"] == "true" for r in dp)
    assert not any(r["attention_dp_enable_balance"] for r in table if r not in dp)


def test_a_speculative_recipe_row_speculates() -> None:
    """DeepSeek-R1 FP8 B200 TRT-LLM, 2026-02-05, image ``1.2.0rc6.post3``: only the MTP sweep
    (``dsr1-fp8-b200-trt-mtp``, commit 5d517074c) ran that image; its recipe
    ``dsr1_fp8_b200_trt_mtp.sh`` passes ``num_nextn_predict_layers: 3``."""
    m = _rows()["2026_04_06_deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x8192_c4_tp8_ep1_68"]
    assert m.recipe.startswith("benchmarks/dsr1_fp8_b200_trt_mtp.sh@")
    spec = row_config(m).speculative
    assert spec is not None
    assert (spec.method, spec.num_speculative_tokens) == ("mtp", 3)


def test_gpt_oss_b200_vllm_recipe_runs_mxfp8_activations() -> None:
    """``gptoss_fp4_b200.sh`` exports ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` (FlashInfer's
    TRT-LLM-gen MXFP4 MoE on MXFP8 activations); the H200 recipe does not (Hopper has no such
    kernel), and neither does any other model's recipe."""
    rows = _rows()
    b200 = [
        m for m in rows.values() if m.recipe.startswith("benchmarks/single_node/gptoss_fp4_b200")
    ]
    assert b200
    assert all(row_config(m).moe_activation == "mxfp8" for m in b200 if m.refused is None)
    others = [m for m in rows.values() if m.recipe and m not in b200]
    assert not any(
        m.moe_activation for m in others if "gpt-oss" not in m.model or "b200" not in m.gpu
    )
    hopper = [m for m in rows.values() if m.recipe and "gpt-oss" in m.model and "h200" in m.gpu]
    assert hopper
    assert all(m.moe_activation is None for m in hopper)


def test_minimax_branch_rows_run_the_recipe_their_image_names() -> None:
    """The 2026-04-03 NVFP4 rows record ``vllm/vllm-openai:nightly-5b8c30d6...``, the image only
    commit 08bcde8f1 ran for ``minimaxm2.5-fp4-b200-vllm``; its ``minimaxm2.5_fp4_b200.sh``
    passes ``--gpu-memory-utilization 0.95 --block-size=32 --kv-cache-dtype fp8`` and no
    ``--max-num-batched-tokens`` (vLLM's 8192)."""
    m = _rows()["2026_03_25_minimax_m2_5_b200_sxm_vllm_fp4_agg_8192x1024_c8_tp4_0_ep1_0_99"]
    assert m.recipe == "benchmarks/single_node/minimaxm2.5_fp4_b200.sh@08bcde8f1"
    c = row_config(m)
    assert (c.engine.gpu_memory_utilization, c.engine.block_size) == (0.95, 32)
    assert (c.engine.max_num_batched_tokens, c.kv_dtype) == (8192, "fp8")


def test_minimax_tp1_rows_hold_every_client_in_an_fp8_kv_cache() -> None:
    """Workflow run 802's TP 1 8k/1k rows (``config_id`` 701, as its 1k/1k TP 1 rows, recipe
    ``minimaxm2.5_fp4_b200.sh@13962fcfa``: ``--kv-cache-dtype fp8``). At concurrency 32 the 32
    requests of 9,216 tokens fit the FP8 pool (measured TTFT 0.5 s: nobody queues) and would not
    fit a bf16 one, which halves it."""
    m = _rows()["minimaxm2_5_b200_vllm_fp4_agg_8192x1024_c32_cfg701"]
    assert m.recipe == "benchmarks/single_node/minimaxm2.5_fp4_b200.sh@13962fcfa"
    c = row_config(m)
    assert (c.kv_dtype, c.engine.max_num_batched_tokens) == ("fp8", 16384)
    need = 32 * (8192 + 1024)
    pool = kv_pool(c)
    assert pool.kv_tokens >= need
    bf16 = kv_pool(replace(c, kv_cache_dtype="bf16"))
    assert bf16.kv_bytes_per_token == 2 * pool.kv_bytes_per_token
    assert bf16.kv_tokens < need


def test_a_row_of_unknown_recipe_keeps_its_familys_kv_cache_dtype() -> None:
    """Every DeepSeek-R1 B200 SGLang recipe the table holds passes ``--kv-cache-dtype
    fp8_e4m3``: a row of that family whose own recipe is not known (2025-11-10, outside any
    sweep of the day) stored its KV cache in FP8 too. Kimi-K2.5 B200 vLLM's recipes differ
    (some pass ``fp8``, some nothing): its recipe-less rows keep vLLM's default (bf16), as
    rows that are not InferenceX's keep theirs."""
    rows = _rows()
    m = rows["2026_04_06_deepseek_r1_b200_sxm_sglang_fp4_agg_8192x1024_c8_tp8_ep1_6"]
    assert (m.client, m.recipe, m.kv_cache_dtype) == ("inferencex", "", "fp8")
    assert row_config(m).kv_dtype == "fp8"
    kimi = rows["2026_04_06_kimi_k2_5_b200_sxm_vllm_fp4_agg_8192x1024_c64_tp4_ep4_1290"]
    assert (kimi.recipe, kimi.kv_cache_dtype) == ("", "bf16")
    own = [m for m in rows.values() if m.client is None and m.backend != "trtllm"]
    assert own
    assert all(m.kv_cache_dtype in ("bf16", None) for m in own)


def test_rows_without_a_known_recipe_keep_the_generic_one(tmp_path: Path) -> None:
    """Not InferenceX's, or not resolved to a recipe: no table entry; a file that reuses a
    table row's id for another point keeps the generic recipe."""
    assert recipe_flags({"id": "no-such-row"}) is None
    src = silicon_csv().read_text(encoding="utf-8").splitlines(keepends=True)
    row_id = "kimik2_5_b200_vllm_fp4_agg_1024x8192_c4_cfg635"
    line = next(x for x in src if x.startswith(row_id + ","))
    edited = tmp_path / "edited.csv"
    edited.write_text(src[0] + line.replace(",1024,8192,", ",2048,8192,", 1), encoding="utf-8")
    (m,) = read_measurements(edited)
    assert (m.isl, m.recipe) == (2048, "")
    (m,) = read_measurements(_write(tmp_path / "same.csv", src[0] + line))
    assert m.recipe.startswith("benchmarks/single_node/kimik2.5_fp4_b200.sh@")
    own = [m for m in _rows().values() if m.client is None]
    assert own
    assert not any(m.recipe for m in own)


@pytest.mark.parametrize(
    "column",
    ["kv_cache_dtype", "prefix_caching", "async_scheduling", "moe_activation",
     "enable_attention_dp", "moe_backend"],
)  # fmt: skip
def test_table_spellings_are_known(column: str) -> None:
    with RECIPES_CSV.open(newline="", encoding="utf-8") as f:
        values = {r[column] for r in csv.DictReader(f)}
    allowed = {
        "kv_cache_dtype": {"", "fp8", "fp8_e4m3", "auto"},
        "moe_activation": {"", "mxfp8"},
        "moe_backend": {"", "TRTLLM", "CUTLASS", "DEEPGEMM", "TRITON"},
    }.get(column, {"", "true", "false"})
    assert values <= allowed


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
