"""Derive ``dynosim/perf/aic/data/vllm_mla_fused_norms.csv`` and print what it corrects.

AIConfigurator's vLLM MLA module tables (``mla_{context,generation}_module_perf.parquet``)
were collected by running vLLM's attention module eagerly, where RMSNorm, rotary embedding
and activations dispatch to their native PyTorch decompositions: "a batch-independent
~50-65us per layer that a serving engine never pays (inductor fuses these under
torch.compile; eager regions use the vllm_c CUDA kernels)". AIConfigurator fixed its
collector (ai-dynamo/aiconfigurator#1423, commit c56db49fe, 2026-07-29) and re-collected the
B200 tables only; the other GPUs' vLLM 0.24.0 tables are still the old collector's
(``provenance: legacy`` and no ``norm_dispatch`` in their ``collection_meta.yaml``).

This script takes the B200 tables before (c56db49fe^) and after (c56db49fe) the fix from a
clone of AIConfigurator and writes, per phase, heads per rank, batch and sequence length, the
median over GEMM and KV-cache dtypes of new / old (the dtypes differ by at most ~0.05). It needs
``git`` and a clone of AIConfigurator with its history (``--repo``). Usage::

    python benchmarks/aic_fused_norms.py --repo PATH [--check]

``--check`` compares the shipped CSV with a fresh derivation instead of writing it.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]

FIX = "c56db49fe"
TABLES = "aic-core/src/aiconfigurator_core/systems/data/b200_sxm/mla/vllm/0.24.0"
OUT = Path(__file__).resolve().parents[1] / "dynosim/perf/aic/data/vllm_mla_fused_norms.csv"
LENGTH = {"context": "isl", "generation": "step"}


def _table(repo: Path, commit: str, phase: str) -> pd.DataFrame:
    blob = subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{TABLES}/mla_{phase}_module_perf.parquet"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    return pd.read_parquet(io.BytesIO(blob))


def derive(repo: Path) -> pd.DataFrame:
    """The ratio table: phase, heads, batch, length, ratio (new / old, median over dtypes)."""
    parts = []
    for phase, length in LENGTH.items():
        keys = ["gemm_type", "kv_cache_dtype", "num_heads", "batch_size", length]
        old, new = _table(repo, f"{FIX}^", phase), _table(repo, FIX, phase)
        both = old.merge(new, on=keys, suffixes=("_old", "_new"))
        both["ratio"] = both["latency_new"] / both["latency_old"]
        by = both.groupby(["num_heads", "batch_size", length])["ratio"].median().reset_index()
        by.columns = ["heads", "batch", "length", "ratio"]
        by.insert(0, "phase", phase)
        parts.append(by)
    out = pd.concat(parts, ignore_index=True)
    out["ratio"] = out["ratio"].round(4)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True,
                        help="a git clone of ai-dynamo/aiconfigurator with history")  # fmt: skip
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    table = derive(args.repo)
    for phase in LENGTH:
        t = table[table["phase"] == phase]
        print(f"{phase}: {len(t)} points, new/old median {t['ratio'].median():.3f}, "
              f"10-90% {t['ratio'].quantile(0.1):.3f}-{t['ratio'].quantile(0.9):.3f}")  # fmt: skip
    if args.check:
        shipped = pd.read_csv(OUT, comment="#")
        same = shipped.equals(table)
        print("shipped table", "matches" if same else "DIFFERS")
        return 0 if same else 1
    with OUT.open("w", encoding="utf-8") as f:
        f.write(
            f"# new / old of AIConfigurator's B200 vLLM 0.24.0 MLA module tables across "
            f"its fused-op collector fix ({FIX}, #1423); benchmarks/aic_fused_norms.py\n"
        )
        table.to_csv(f, index=False)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
