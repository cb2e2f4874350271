"""Measurement readers: AIPerf and vLLM bench result files, bad rows, warm-up inference."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynosim.errors import WorkloadError
from dynosim.validation.measurements import read_measurements
from search.cli.simulator.validate import markdown_table

DATA = Path(__file__).resolve().parents[1] / "data" / "measurements"
CONTEXT = {"model": "Qwen/Qwen3-8B", "gpu": "h200_sxm", "backend": "vllm", "tp": 2}


def test_aiperf_json_reads_the_run_and_takes_the_rest_from_the_context() -> None:
    [m] = read_measurements(DATA / "aiperf_profile_export_aiperf.json", CONTEXT)
    assert (m.model, m.gpu, m.backend, m.tp) == ("Qwen/Qwen3-8B", "h200_sxm", "vllm", 2)
    assert (m.isl, m.osl, m.concurrency) == (1000, 200, 32)
    assert (m.ttft_ms, m.tpot_ms) == (158.8, 11.76)
    assert (m.client, m.warmups) == ("aiperf", 0)
    assert m.where.endswith("aiperf_profile_export_aiperf.json:1")


def test_aiperf_csv_reads_the_first_section() -> None:
    [m] = read_measurements(
        DATA / "aiperf_profile_export_aiperf.csv", {**CONTEXT, "concurrency": 16}
    )
    assert (m.isl, m.osl, m.concurrency) == (2000, 250, 16)
    assert (m.ttft_ms, m.tpot_ms) == (120.5, 9.75)
    assert m.client == "aiperf"
    with pytest.raises(WorkloadError, match=r"csv:2: concurrency: not in the file; give it with "
                       r"--concurrency N"):  # fmt: skip
        read_measurements(DATA / "aiperf_profile_export_aiperf.csv", CONTEXT)


def test_vllm_bench_json_means_over_completed_requests() -> None:
    [m] = read_measurements(
        DATA / "vllm_bench_serve_result.json", {"gpu": "h200_sxm", "backend": "vllm"}
    )
    assert m.model == "Qwen/Qwen3-8B"  # model_id
    assert (m.isl, m.osl, m.concurrency) == (1024, 128, 64)
    assert (m.ttft_ms, m.tpot_ms, m.tp) == (412.7, 31.25, 1)
    assert m.client == "vllm-bench"
    with pytest.raises(WorkloadError, match=r"vllm_bench_serve_result\.json:1: gpu: not in the "
                       r"file; give it with --deployment D.yaml"):  # fmt: skip
        read_measurements(DATA / "vllm_bench_serve_result.json")


def test_bad_tool_files_name_the_file_and_field(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_text('{"mean_ttft_ms": "slow", "mean_tpot_ms": 1, "completed": 3, '
                 '"total_input_tokens": 30, "total_output_tokens": 30}')  # fmt: skip
    with pytest.raises(WorkloadError, match=r"r\.json: mean_ttft_ms: got 'slow'"):
        read_measurements(f, CONTEXT)
    f.write_text('{"mean_ttft_ms": 1, "mean_tpot_ms": 1, "completed": 3\n,}')
    with pytest.raises(WorkloadError, match=r"r\.json:2: invalid JSON"):
        read_measurements(f, CONTEXT)
    f.write_text('{"hello": 1}')
    with pytest.raises(WorkloadError, match=r"r\.json:1: unknown JSON measurement format"):
        read_measurements(f, CONTEXT)


def test_validate_on_a_file_with_a_bad_row_names_the_file_and_line() -> None:
    with pytest.raises(WorkloadError, match=r"bad_row\.csv:3: ttft_ms: got 'fast'") as info:
        read_measurements(DATA / "bad_row.csv")
    assert "\n" not in str(info.value)


def test_inferencex_rows_before_2026_01_ran_without_warmups(tmp_path: Path) -> None:
    head = ("id,silicon_data_source,backend,model_path,system,precision,mode,isl,osl,"
            "gemm_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,silicon_ttft_ms,"
            "silicon_tpot_ms")  # fmt: skip
    f = tmp_path / "s.csv"
    f.write_text("\n".join([
        head,
        "a,source_file=x.csv; silicon_concurrency=8,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,,"
        "8,1,1,1,50,10",
        "b,source_file=x.csv; measured=2026-01-23,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,,"
        "8,1,1,1,50,10",
        "c,internal/path,vllm,Qwen/Qwen3-8B,h200_sxm,,agg,1000,100,,8,1,1,1,50,10",
    ]) + "\n")  # fmt: skip
    assert [m.warmups for m in read_measurements(f)] == [0, None, None]


def test_the_readme_table_is_markdown() -> None:
    text = markdown_table([{"model": "m", "system": "g", "backend": "b", "replayed": 3,
                            "ttft_mape": 12.34, "ttft_bias": -5.0, "tpot_mape": 4.0,
                            "tpot_bias": 1.0}, {"replayed": 0}])  # fmt: skip
    lines = text.splitlines()
    assert lines[0].startswith("| model | GPU | backend | rows | TTFT MAPE %")
    assert lines[2] == "| m | g | b | 3 | 12.3 | -5.0 | 4.0 | 1.0 |"
    assert len(lines) == 3
