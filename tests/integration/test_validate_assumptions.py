"""``dynosim validate`` says what it assumed and can print every row (issue 20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search.cli import main

CSV = "model,gpu,backend,tp,isl,osl,concurrency,ttft_ms,tpot_ms\n"


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")


def test_plain_csv_names_the_closed_loop_and_the_engine_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "m.csv"
    f.write_text(CSV + "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,64,8,48,10\n")
    # the client the shipped profile fitted for vLLM rows without one (InferenceX's since the
    # 11-group refit) is not this test's point: the closed loop is named
    assert main(["validate", str(f), "--timing", "roofline",
                 "--unrecorded-client", "closed-loop"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("assumed for")]
    assert line.startswith("assumed for 1 rows that record no client")
    assert "replayed as closed-loop" in line
    assert "lock-step closed loop of `concurrency` clients" in line
    assert "(4 requests each, no warm-up)" in line
    assert "engine vllm max_num_seqs = concurrency" in line
    assert "prefix caching off" in line

    assert main(["validate", str(f), "--timing", "roofline", "--unrecorded-client", "inferencex",
                 "--rounds", "2"]) == 0  # fmt: skip
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("assumed"))
    assert "replayed as inferencex" in line
    assert "client InferenceX's benchmark_serving" in line


def test_rows_prints_each_row_with_its_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "m.csv"
    f.write_text(CSV + "Qwen/Qwen3-8B,h200_sxm,vllm,1,1000,64,8,48,10\n"
                 "Qwen/Qwen3-8B,h200_sxm,sglang,1,500,64,4,30,8\n")  # fmt: skip
    out_json = tmp_path / "v.json"
    assert main(["validate", str(f), "--timing", "roofline", "--rows", "--json",
                 str(out_json), "--unrecorded-client", "closed-loop"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    for row in json.loads(out_json.read_text())["rows"]:
        (line,) = [x for x in out.splitlines() if row["where"] in x]
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        assert cells[8] == "closed-loop"
        assert float(cells[10]) == pytest.approx(row["simulated_ttft_ms"], abs=0.05)
        assert float(cells[13]) == pytest.approx(row["simulated_tpot_ms"], abs=0.005)
    assert main(["validate", str(f), "--timing", "roofline"]) == 0
    assert str(f) + ":2" not in capsys.readouterr().out  # without --rows, no row lines
