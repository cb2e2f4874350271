"""``dynosim models``, ``gpus``, ``backends`` list what ``simulate`` accepts (issue 20)."""

from __future__ import annotations

import pytest

from dynosim.perf.catalog import GPU_HOUR_USD, gpu_names
from search.cli import main


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")


def rows(out: str) -> dict[str, list[str]]:
    """First cell -> cells, of each table row."""
    table = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) > 1 and cells[0]:
            table[cells[0]] = cells
    return table


def test_gpus_with_the_price_used_and_its_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    table = rows(out)
    assert set(gpu_names()) <= set(table)
    for gpu in gpu_names():
        price = GPU_HOUR_USD.get(gpu)
        assert table[gpu][-1] == ("none (set gpu_hour_usd)" if price is None else f"{price:.2f}")
    assert table["h200_sxm"][1:3] == ["141", "989"]  # GiB, dense BF16 TFLOP/s
    assert "GPU_HOUR_USD" in out
    assert "rough 2025 US cloud on-demand" in out


def test_models_and_filter(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--filter", "llama-3.1-8b"]) == 0
    table = rows(capsys.readouterr().out)
    assert table["meta-llama/Llama-3.1-8B-Instruct"][1:3] == ["8.0 B", "dense"]
    assert table["meta-llama/Llama-3.1-8B-Instruct"][-1] == "meta-llama/Meta-Llama-3.1-8B"
    assert not any("Qwen" in name for name in table)


def test_backends_name_aiconfigurator_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["backends"]) == 0
    table = rows(capsys.readouterr().out)
    assert {"vllm", "sglang", "trtllm"} <= set(table)
    assert "h200_sxm 0.5.14" in table["sglang"][-1]
