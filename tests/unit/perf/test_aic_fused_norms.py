"""vLLM MLA module tables of AIConfigurator's old collector, rescaled to fused norms."""

from __future__ import annotations

import csv
from importlib import resources
from typing import Any

import pandas as pd  # type: ignore[import-untyped]  # aiconfigurator-core reads its tables with it
import pytest

from dynosim.config import DeploymentConfig
from dynosim.perf import aic
from dynosim.perf.aic.fused_norms import RATIOS_CSV, FusedNorms, _ratio, legacy_native_norms

pytestmark = pytest.mark.filterwarnings("ignore")

_KIMI = "moonshotai/Kimi-K2.5"


def _key(gpu: str, backend: str = "vllm", model: str = _KIMI) -> Any:
    dtype = "nvfp4" if model == _KIMI and gpu.startswith("b") else "fp8"
    config = {"model": model, "gpu": gpu, "backend": backend, "dtype": dtype, "tp": 8}
    return aic.resolve_key(DeploymentConfig.from_dict(config))


def test_only_the_old_collectors_vllm_mla_tables_are_rescaled() -> None:
    assert legacy_native_norms(_key("b300_sxm"))
    assert legacy_native_norms(_key("h200_sxm"))
    assert not legacy_native_norms(_key("b200_sxm"))  # re-collected with fused norms (#1423)
    assert not legacy_native_norms(_key("b300_sxm", "sglang"))
    assert not legacy_native_norms(_key("b300_sxm", model="Qwen/Qwen3-235B-A22B-FP8"))  # no MLA


def _csv_ratio(phase: str, heads: int, batch: int, length: int) -> float:
    with RATIOS_CSV.open(encoding="utf-8") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        found = [float(r["ratio"]) for r in rows if (r["phase"], int(r["heads"]),
                 int(r["batch"]), int(r["length"])) == (phase, heads, batch, length)]  # fmt: skip
    assert len(found) == 1
    return found[0]


class _Handle:
    """Two ops of 1 ms each: the MLA module and a norm."""

    def evaluate_context_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        return [("context_mla_block", 1.0, 0.0, "silicon"), ("context_add_norm_1", 1.0, 0.0, "x")]

    def evaluate_generation_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        return [("generation_mla_block", 1.0, 0.0, "silicon"), ("generation_add_norm_1", 1.0)]


def test_the_module_is_scaled_by_b200s_ratio_at_the_same_point() -> None:
    h = FusedNorms(_Handle(), heads=8.0)
    mla, norm = h.evaluate_generation_ops([0, 1], batch_size=16, s=1024)
    assert mla[1] == pytest.approx(_csv_ratio("generation", 8, 16, 1024), rel=1e-12)
    assert mla[0] == "generation_mla_block"
    assert mla[2:] == (0.0, "silicon")
    assert norm == ("generation_add_norm_1", 1.0)
    # context: read at the chunk plus its cached prefix, as AIConfigurator reads the table
    mla, norm = h.evaluate_context_ops([0, 1], batch_size=1, s=512, prefix=512)
    assert mla[1] == pytest.approx(_csv_ratio("context", 8, 1, 1024), rel=1e-12)
    assert norm[1] == 1.0
    # between grid points: between the neighbours' ratios
    mid = _ratio("generation", 8.0, 16, 1448)
    ends = sorted((_csv_ratio("generation", 8, 16, 1024), _csv_ratio("generation", 8, 16, 2048)))
    assert ends[0] <= mid <= ends[1]


def _table(gpu: str) -> pd.DataFrame:
    root = resources.files("aiconfigurator_core") / "systems" / "data" / gpu / "mla" / "vllm"
    with resources.as_file(root / "0.24.0" / "mla_generation_module_perf.parquet") as path:
        t = pd.read_parquet(path)
    t = t[(t.gemm_type == "nvfp4") & (t.kv_cache_dtype == "fp8") & (t.num_heads == 8)]
    return t.set_index(["batch_size", "step"])["latency"]


def test_b300s_rescaled_module_is_b200s_recollected_one() -> None:
    """B300 has B200's HBM bandwidth and at least its compute: a decode MLA module at small and
    medium batches cannot be slower. AIConfigurator's old-collector B300 table is ~2x B200's
    re-collected one there; rescaled, it is within 15% of it at every point and 5% at the median
    (the ratio is the median over dtypes, this is NVFP4 GEMMs with an FP8 KV cache)."""
    b200, b300 = _table("b200_sxm"), _table("b300_sxm")
    fused = []
    for batch in (1, 4, 16, 64):
        for step in (1024, 8192):
            legacy = b300[(batch, step)] / b200[(batch, step)]
            assert legacy > 1.5
            fused.append(legacy * _ratio("generation", 8.0, batch, step))
    assert min(fused) > 0.85, fused
    assert max(fused) < 1.15, fused
    assert 0.95 < sorted(fused)[len(fused) // 2] < 1.05, fused
