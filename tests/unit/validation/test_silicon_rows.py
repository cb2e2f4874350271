"""The GPU count and per-rank batch of InferenceX-dump rows, read as the point ran.

Worked rows are copied from AIConfigurator's ``silicon_sample.csv`` (their ids name the
InferenceX point: ``..._c256_tp4_ep4_946`` ran with TP 4 and EP 4 on 4 GPUs).
"""

from __future__ import annotations

import csv
from pathlib import Path

from dynosim.validation.measurements import read_measurements
from dynosim.validation.silicon import parse_row

_DUMP = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency={c}; wip=False"


def _row(backend: str, model: str, tp: int, adp: str, moe_tp: int, ep: int, bs: int,
         source: str) -> dict[str, str]:  # fmt: skip
    return {
        "silicon_data_source": source, "backend": backend, "model_path": model,
        "system": "b200_sxm", "precision": "fp4", "mode": "agg", "isl": "1024", "osl": "1024",
        "gemm_quant_mode": "nvfp4", "batch_size": str(bs), "tp_size": str(tp), "pp_size": "1",
        "attention_dp_size": adp, "moe_tp_size": str(moe_tp), "moe_ep_size": str(ep),
        "silicon_ttft_ms": "100", "silicon_tpot_ms": "10",
    }  # fmt: skip


def _shape(r: dict[str, str]) -> tuple[int, int, int | None, int, int, int]:
    row = parse_row(r)
    return row.tp, row.attention_dp, row.moe_tp, row.ep, row.concurrency, row.batch_size


def test_trtllm_attention_dp_row_runs_on_tp_gpus_with_the_clients_split_over_tp_ranks() -> None:
    # deepseek_r1 b200 trtllm c256 tp4_ep4: columns tp 1, attention DP 16, moe 4 x 4, batch 16.
    r = _row("trtllm", "deepseek-ai/DeepSeek-R1", 1, "16", 4, 4, 16, _DUMP.format(c=256))
    # 4 GPUs: 4 DP ranks of attention TP 1, experts EP 4 (4 / 4 = 1-way each); 256 / 4 = 64.
    assert _shape(r) == (1, 4, 1, 4, 256, 64)


def test_trtllm_and_sglang_rows_without_attention_dp_run_tp_wide_not_tp_x_ep() -> None:
    # sglang c64 tp4_ep4: columns tp 16, moe 4 x 4 -> TP 4 on 4 GPUs, experts EP 4.
    r = _row("sglang", "deepseek-ai/DeepSeek-R1", 16, "1", 4, 4, 64, _DUMP.format(c=64))
    assert _shape(r) == (4, 1, 1, 4, 64, 64)
    # tp8_ep8: columns tp 64 -> 8 GPUs; a tp2 ep2 point (columns 4, moe 2 x 2) -> 2 GPUs.
    assert _shape(_row("trtllm", "deepseek-ai/DeepSeek-R1", 64, "1", 8, 8, 4,
                       _DUMP.format(c=4)))[:4] == (8, 1, 1, 8)  # fmt: skip
    assert _shape(_row("trtllm", "openai/gpt-oss-120b", 4, "1", 2, 2, 16,
                       _DUMP.format(c=16)))[:4] == (2, 1, 1, 2)  # fmt: skip


def test_vllm_attention_dp_row_runs_tp_dp_ranks_of_one_gpu() -> None:
    # minimax b200 vllm c256 (db-dump): columns tp 4, attention DP 4, moe 1 x 16, batch 64.
    source = "db-dump/2026-04-27; config_id=691; silicon_concurrency=256; workflow_run_id=799"
    r = _row("vllm", "MiniMaxAI/MiniMax-M2.5", 4, "4", 1, 16, 64, source)
    assert _shape(r) == (1, 4, 1, 4, 256, 64)


def test_the_recorded_concurrency_wins_over_batch_size_x_dp() -> None:
    # One tp8_ep8 row records batch_size = the clients (64) with attention DP 64 in the columns.
    r = _row("trtllm", "deepseek-ai/DeepSeek-R1", 1, "64", 8, 8, 64, _DUMP.format(c=64))
    assert _shape(r) == (1, 8, 1, 8, 64, 8)


def test_rows_in_aiconfigurators_own_convention_are_unchanged() -> None:
    # 2026-03-25 rows (id ..._tp8_0_ep8_0_974) already say tp 1 x attention DP 8 = 8 GPUs.
    other = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=256"
    r = _row("trtllm", "deepseek-ai/DeepSeek-R1", 1, "8", 1, 8, 32, other)
    assert _shape(r) == (1, 8, 1, 8, 256, 32)
    # AIConfigurator's own campaigns: tp 4 with experts 2-way TP x EP 2 on 4 GPUs.
    aic = "source_file=/x/h100_sxm/trtllm/1.0.0rc3/Qwen_Qwen3-235B-A22B-FP8.csv"
    q = _row("trtllm", "Qwen/Qwen3-235B-A22B-FP8", 4, "", 2, 2, 16, aic)
    q["precision"], q["gemm_quant_mode"] = "fp8", "fp8"
    assert _shape(q)[:4] == (4, 1, 2, 2)
    # EP 1 points of the dump read the same either way.
    assert _shape(_row("sglang", "deepseek-ai/DeepSeek-R1", 8, "1", 8, 1, 8,
                       _DUMP.format(c=8)))[:4] == (8, 1, 8, 1)  # fmt: skip


def test_validate_replays_the_row_on_the_gpus_it_ran_on(tmp_path: Path) -> None:
    """``read_measurements`` (what ``validate`` replays) takes parse_row's shape, tp included."""
    r = _row("trtllm", "deepseek-ai/DeepSeek-R1", 1, "16", 4, 4, 16, _DUMP.format(c=256))
    r |= {"id": "x", "backend_version": "1.2.0", "pp_size": "1"}
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(r))
        w.writeheader()
        w.writerow(r)
    (m,) = read_measurements(path)
    assert (m.tp, m.attention_dp, m.moe_tp, m.ep, m.concurrency) == (1, 4, 1, 4, 256)
    sglang = _row("sglang", "deepseek-ai/DeepSeek-R1", 16, "1", 4, 4, 64, _DUMP.format(c=64))
    sglang |= {"id": "y", "backend_version": "0.5.9"}
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(sglang))
        w.writeheader()
        w.writerow(sglang)
    (s,) = read_measurements(path)
    assert (s.tp, s.attention_dp, s.moe_tp, s.ep, s.concurrency) == (4, 1, 1, 4, 64)


def test_inferencex_gb200_agg_rows_are_disaggregated_deployments_and_refused(
    tmp_path: Path,
) -> None:
    # 2026_04_06_deepseek_r1_gb200_trtllm_fp4_agg_8192x1024_c2150_tp32_ep1_121: InferenceX's GB200
    # runner launched 8k/1k c=2150 as 6 context servers of 4 GPUs + 1 DEP-8 generation server.
    r = _row("trtllm", "deepseek-ai/DeepSeek-R1", 32, "1", 32, 1, 2150, _DUMP.format(c=2150))
    r["system"], r["isl"], r["osl"] = "gb200", "8192", "1024"
    own = dict(r, silicon_data_source="source_file=/x/gb200/trtllm/1.2.0rc6/deepseek_r1.csv")
    own["tp_size"], own["moe_tp_size"], own["moe_ep_size"] = "8", "1", "8"
    path = tmp_path / "silicon.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(r))
        writer.writeheader()
        writer.writerows([r, own, dict(r, system="b200_sxm", tp_size="8", moe_tp_size="8")])
    dump, aic, b200 = read_measurements(path)
    assert dump.refused is not None
    assert "tp_size 32 is their total GPU count" in dump.refused
    # AIConfigurator's own GB200 run (one TP 8 server) and the same row on B200 still replay.
    assert aic.refused is None
    assert aic.tp == 8
    assert b200.refused is None
