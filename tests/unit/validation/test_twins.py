"""A recipe-less row that repeats a measured point is replayed as the row that knows its recipe."""

from __future__ import annotations

from pathlib import Path

from dynosim.validation.measurements import read_measurements
from dynosim.validation.silicon import silicon_csv
from dynosim.validation.validate import row_config

_DATABASE = "2026_03_25_qwen3_5_397b_b200_sxm_sglang_fp8_agg_1024x1024_c64_tp4_0_ep1_0_479,"
_EXPORT = "qwen3_5_397b_gap_analysis_qwen3_5_397b_gap_analysis_b200_sxm_sglang_fp8_agg_1024x1024_"


def _lines() -> tuple[str, str, str]:
    src = silicon_csv().read_text(encoding="utf-8").splitlines(keepends=True)
    database = next(x for x in src if x.startswith(_DATABASE))
    export = next(x for x in src if x.startswith(_EXPORT) and ",1113.54,18.39" in x)
    return src[0], database, export


def test_the_exports_repeat_of_an_mtp_point_replays_with_mtp(tmp_path: Path) -> None:
    """The gap-analysis export's TP 4, concurrency 64 point (TTFT 1,113.54 ms, TPOT 18.39 ms)
    is the MTP recipe's database row rounded: same speculation, flags and deployment."""
    header, database, export = _lines()
    path = tmp_path / "rows.csv"
    path.write_text(header + database + export, encoding="utf-8")
    db, twin = read_measurements(path)
    assert db.recipe.startswith("benchmarks/single_node/qwen3.5_fp8_b200_mtp.sh")
    assert db.speculative == {"method": "mtp", "num_speculative_tokens": 3}
    assert twin.where.endswith(":3")
    assert twin.source == "qwen3.5-397b-gap-analysis.csv"
    assert (twin.recipe, twin.speculative, twin.engine) == (db.recipe, db.speculative, db.engine)
    assert row_config(twin) == row_config(db)


def test_a_point_that_differs_keeps_its_own_reading(tmp_path: Path) -> None:
    """One hundredth of a millisecond apart, or alone in the file: not the same measurement."""
    header, database, export = _lines()
    path = tmp_path / "rows.csv"
    path.write_text(header + database + export.replace(",18.39", ",18.40"), encoding="utf-8")
    _, other = read_measurements(path)
    assert (other.recipe, other.speculative) == ("", None)
    path.write_text(header + export, encoding="utf-8")
    (alone,) = read_measurements(path)
    assert (alone.recipe, alone.speculative) == ("", None)


def test_the_shipped_sample_has_exactly_these_twins() -> None:
    rows = read_measurements(silicon_csv())
    adopted = [m for m in rows if "gap-analysis" in m.source and m.recipe]
    assert len(adopted) == 106
    assert sum(1 for m in adopted if m.speculative) == 21
    assert not any(m.recipe for m in rows if m.source.startswith("/Users/"))
