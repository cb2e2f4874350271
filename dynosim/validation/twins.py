"""Rows that repeat another row's measurement are replayed as that row.

AIConfigurator's ``silicon_sample.csv`` holds some InferenceX measurements twice: once from
InferenceX's database, under an ``id`` that :mod:`dynosim.validation.recipes` resolves to the
recipe the point ran, and once from a gap-analysis export (``qwen3.5-397b-gap-analysis.csv``,
``kimi-k2.5-gap-analysis.csv``) that kept the figures, rounded to two decimals, but not the
recipe. 21 of the Qwen3.5-397B B200 export's rows repeat points of the multi-token-prediction
recipe (``qwen3.5_fp8_b200_mtp.sh``: TTFT 1,113.54 ms and TPOT 18.39 ms at TP 4, concurrency 64,
like its two database rows) and were replayed without speculation, as the recipe the export
names (none) says.

A row without a recipe whose deployment (model, GPU, backend, dtype, TP, EP, ISL, OSL,
concurrency) and measured TTFT and TPOT, to two decimals, equal those of rows with one is the
same measurement: it is replayed as they are (client, recipe flags, speculation) when they all
ran the same recipe. Its own place in the file (``where``) and its source stay.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from dynosim.validation.measurement import Measurement

__all__ = ["adopt_twins"]

_Key = tuple[str, str, str, str, int, int, int, int, int, float, float]


def _key(m: Measurement) -> _Key:
    return (m.model, m.gpu, m.backend, m.dtype, m.tp, m.ep, m.isl, m.osl, m.concurrency,
            round(m.ttft_ms, 2), round(m.tpot_ms, 2))  # fmt: skip


def adopt_twins(rows: list[Measurement]) -> list[Measurement]:
    """``rows`` with each recipe-less repeat of a measurement replaced by its recipe's row."""
    known: dict[_Key, list[Measurement]] = defaultdict(list)
    for m in rows:
        if m.recipe and m.refused is None and m.pools is None:
            known[_key(m)].append(m)
    if not known:
        return rows
    out = []
    for m in rows:
        twins = known.get(_key(m), []) if not m.recipe and m.refused is None else []
        same = twins and len({t.recipe for t in twins}) == 1
        out.append(replace(twins[0], where=m.where, source=m.source) if same else m)
    return out
