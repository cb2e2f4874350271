"""vLLM's MLA module as the engine runs it, without the eager norms of an old collector.

AIConfigurator times vLLM's MLA attention (DeepSeek-V3/R1, Kimi-K2) as one measured module,
``mla_{context,generation}_module_perf.parquet``. Its collector ran the module eagerly, where
RMSNorm, rotary embedding and activations dispatch to their native PyTorch decompositions, "a
batch-independent ~50-65us per layer that a serving engine never pays (inductor fuses these
under torch.compile; eager regions use the vllm_c CUDA kernels)"; AIConfigurator fixed the
collector and re-collected its B200 tables only (ai-dynamo/aiconfigurator#1423, commit
c56db49fe: generation at 64 heads, KV 8k, FP8, batch 16 went 143.7 -> 95.2 us per layer, "within
~10% of the torch-profiler-measured in-engine per-layer cost"). Every other GPU's vLLM 0.24.0
MLA tables are the old collector's: their ``collection_meta.yaml`` says ``provenance: legacy``
and, unlike B200's, records no ``norm_dispatch``.

Such a table's module time is scaled by what the fix did to the same point of B200's table
(new / old at the same heads per rank, batch and sequence length; median over GEMM and KV
dtypes, which differ by at most ~0.05), ``data/vllm_mla_fused_norms.csv``, derived by
``benchmarks/aic_fused_norms.py`` from AIConfigurator's history. The assumption is that the
native chain takes the same share of the module on every GPU; on B300 it reproduces B200's
re-collected table within a few percent (B300's legacy table is 0.97x B200's legacy one at
the median), on Hopper it removes ~45-60 us per layer at small batches as on B200. Context
queries are scaled at the length the table is read at (the chunk plus its cached prefix).
"""

from __future__ import annotations

import csv
import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from dynosim.perf.aic.key import AicKey, _quiet
from dynosim.perf.catalog import model_spec

if TYPE_CHECKING:
    from scipy.interpolate import RegularGridInterpolator

RATIOS_CSV = Path(__file__).with_name("data") / "vllm_mla_fused_norms.csv"
_MODULE_OPS = {"context": "context_mla_block", "generation": "generation_mla_block"}


@functools.cache
def _ratio_grid(phase: str) -> RegularGridInterpolator:
    """B200's new / old over (log2 heads, log2 batch, log2 length).

    A missing point takes its nearest length's value (the tables stop short of the largest
    lengths at large batches).
    """
    from scipy.interpolate import RegularGridInterpolator  # not on a cached-table start-up

    with RATIOS_CSV.open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(line for line in f if not line.startswith("#"))
                if r["phase"] == phase]  # fmt: skip
    names = ("heads", "batch", "length")
    axes = [np.unique([int(r[n]) for r in rows]) for n in names]
    grid = np.full([len(a) for a in axes], np.nan)
    for r in rows:
        at = tuple(int(np.searchsorted(a, int(r[n]))) for a, n in zip(axes, names, strict=True))
        grid[at] = float(r["ratio"])
    for line in grid.reshape(-1, grid.shape[-1]):  # a view: filled in place
        known = np.flatnonzero(~np.isnan(line))
        line[:] = line[known[np.abs(np.arange(len(line))[:, None] - known).argmin(axis=1)]]
    return RegularGridInterpolator([np.log2(a.astype(float)) for a in axes], grid)


def _ratio(phase: str, heads: float, batch: int, length: int) -> float:
    interp = _ratio_grid(phase)
    point = [
        min(max(math.log2(max(v, 1)), float(axis[0])), float(axis[-1]))
        for v, axis in zip((heads, batch, length), interp.grid, strict=True)
    ]
    return float(interp([point])[0])


def legacy_native_norms(key: AicKey) -> bool:
    """Whether ``key``'s vLLM MLA module tables are the old collector's (see the module doc)."""
    if key.backend != "vllm" or not model_spec(key.aic_model).is_mla:
        return False
    with _quiet():
        from aiconfigurator_core.sdk import perf_database
        from aiconfigurator_core.sdk.operations.base import resolve_op_data_path

        db = perf_database.get_database(key.gpu, key.backend, key.backend_version)
        if db is None:
            return False
        root = Path(db.systems_root) / db.system_spec["data_dir"]
        table = Path(resolve_op_data_path(str(root), key.backend, key.backend_version,
                                          "mla_generation_module_perf.parquet"))  # fmt: skip
    meta_path = table.with_name("collection_meta.yaml")
    if not meta_path.is_file():
        return False
    meta = yaml.safe_load(meta_path.read_text(encoding="utf-8")) or {}
    entry = (meta.get("tables") or {}).get("mla_generation_module_perf") or {}
    return meta.get("provenance") == "legacy" and "norm_dispatch" not in entry


class FusedNorms:
    """An engine handle whose vLLM MLA module times are scaled as if collected with fused norms."""

    def __init__(self, own: Any, heads: float) -> None:
        self._own, self._heads = own, heads

    def evaluate_context_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        """The context ops at ``idx``, the MLA module's time rescaled."""
        length = int(kw.get("s", 1)) + int(kw.get("prefix", 0) or 0)
        return self._scaled("context", idx, kw, length)

    def evaluate_generation_ops(self, idx: list[int], **kw: Any) -> list[Any]:
        """The generation ops at ``idx``, the MLA module's time rescaled."""
        return self._scaled("generation", idx, kw, int(kw.get("s", 1)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._own, name)

    def _scaled(self, phase: str, idx: list[int], kw: dict[str, Any], length: int) -> list[Any]:
        ops = list(getattr(self._own, f"evaluate_{phase}_ops")(idx, **kw))
        batch = int(kw.get("batch_size", 1))
        return [
            (op[0], float(op[1]) * _ratio(phase, self._heads, batch, length), *op[2:])
            if str(op[0]) == _MODULE_OPS[phase]
            else op
            for op in ops
        ]


def with_fused_norms(key: AicKey, h: Any) -> Any:
    """``h``, its MLA module rescaled if its tables are the old collector's (else ``h``)."""
    if not legacy_native_norms(key):
        return h
    return FusedNorms(h, model_spec(key.aic_model).heads / key.tp)
