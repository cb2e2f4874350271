"""The fidelity benchmark's tables and issue 19's targets (from ``fidelity.summarise``).

:func:`report` is the full text report, :func:`summary_table` the README's table and
:func:`targets` checks issue 19's targets. Held-out set (aggregated rows that replay): pooled
TPOT MAPE <= 15% and TTFT MAPE <= 35%, no group of >= 10 rows above TPOT 30% or TTFT 60%, the
median simulated/measured TTFT ratio within [0.8, 1.25] in every concurrency bucket, >= 90% of
the rows replayed. Calibration set: TTFT <= 20% and TPOT <= 10% in every group. Each target is
listed with its figure and whether it is met, and the groups over their limits are named (by
how much, and which way).
"""

from __future__ import annotations

from typing import Any


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


HEAD = ("| slice | rows | TTFT MAPE % | TTFT med % | TTFT bias % | TPOT MAPE % | TPOT med % "
        "| TPOT bias % |\n|---|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip


def _line(label: str, s: dict[str, Any]) -> str:
    cells = [_f(s[k]) for k in ("ttft_mape", "ttft_medae", "ttft_bias",
                                "tpot_mape", "tpot_medae", "tpot_bias")]  # fmt: skip
    return f"| {label} | {s['rows']} | " + " | ".join(cells) + " |"


def summary_table(data: dict[str, Any]) -> str:
    """The README table: rows, pooled and per slice, both sets, and the bucket ratios."""
    lines = ["| set | rows | aggregated replayed | refused | estimated / unmodelled |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, s in data.items():
        share = s["agg_replayed"] / max(s["agg_rows"], 1)
        lines.append(f"| {name} | {s['rows']} | {s['agg_replayed']} of {s['agg_rows']} "
                     f"({share:.0%}) | {s['rows'] - s['replayed']} | "
                     f"{s['estimated']} / {s['unmodelled']} |")  # fmt: skip
    lines += ["", HEAD]
    for name, s in data.items():
        lines.append(_line(f"**{name}** pooled (agg)", s["pooled_agg"]))
        lines.append(_line(f"{name}: without estimated / unmodelled", s["pooled_agg_clean"]))
        if s["pooled_agg_unique"]["rows"] != s["pooled_agg"]["rows"]:
            lines.append(_line(f"{name}: without copies of calibration rows",
                               s["pooled_agg_unique"]))  # fmt: skip
        for keys in s["slices"].values():
            for key, st in keys.items():
                if st["rows"]:
                    lines.append(_line(f"{name}: {key}", st))
    lines.append("")
    buckets = list(next(iter(data.values()))["buckets"]["agg"])
    lines.append("| set | median sim/measured TTFT (TPOT): " + " | ".join(buckets)
                 + " |\n|---|" + "---:|" * len(buckets))  # fmt: skip
    for name, s in data.items():
        cells = [f"{_f(b['ttft_ratio'], '{:.2f}')} ({_f(b['tpot_ratio'], '{:.2f}')})"
                 for b in s["buckets"]["agg"].values()]  # fmt: skip
        lines.append(f"| {name} (agg) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(data: dict[str, Any]) -> str:
    """The full text report (markdown tables)."""
    out = []
    for name, s in data.items():
        out.append(f"\n## {name}: {s['rows']} rows, {s['replayed']} replayed "
                   f"(aggregated {s['agg_replayed']} of {s['agg_rows']}); "
                   f"{s['estimated']} with estimated step times, "
                   f"{s['unmodelled']} of unmodelled architecture (counted apart)\n")  # fmt: skip
        for r, n in s["refused"].items():
            out.append(f"- refused {n}: {r}")
        out.append("\n" + HEAD)
        out.append(_line("pooled (agg)", s["pooled_agg"]))
        out.append(_line("pooled (agg) without apart", s["pooled_agg_clean"]))
        out.append(_line("apart (estimated / unmodelled)", s["apart"]))
        out.append(_line("pooled (agg) without copies of calibration rows",
                         s["pooled_agg_unique"]))  # fmt: skip
        for title, keys in s["slices"].items():
            for key, st in keys.items():
                out.append(_line(f"{title}: {key}", st))
        for mode, buckets in s["buckets"].items():
            for label, st in buckets.items():
                if st["rows"]:
                    out.append(_line(f"{mode} {label} (ratio TTFT {_f(st['ttft_ratio'], '{:.2f}')}"
                                     f", TPOT {_f(st['tpot_ratio'], '{:.2f}')})", st))  # fmt: skip
        out.append("\n" + HEAD.replace("| slice |", "| group |"))
        for g in s["groups"]:
            tag = " (apart)" if g["apart"] else ""
            refused = f" ({g['refused']} refused)" if g["refused"] else ""
            out.append(_line(f"{g['group']}{tag}{refused}", g))
    return "\n".join(out) + "\n"


POOLED = {"ttft_mape": 35.0, "tpot_mape": 15.0}
HELD_OUT_GROUP = {"ttft_mape": 60.0, "tpot_mape": 30.0}
MIN_GROUP_ROWS = 10
CALIBRATION_GROUP = {"ttft_mape": 20.0, "tpot_mape": 10.0}
RATIO = (0.8, 1.25)
REPLAYED = 0.90


def _over(groups: list[dict[str, Any]], limits: dict[str, float], min_rows: int) -> list[str]:
    """The aggregated groups of ``min_rows`` or more rows over a limit, with their figures."""
    out = []
    for g in groups:
        if not g["group"].endswith("/agg") or g["rows"] < min_rows:
            continue
        over = [
            f"{key[:4].upper()} {g[key]:.1f}% ({'+' if g[key[:4] + '_bias'] > 0 else '-'})"
            for key, limit in limits.items()
            if g[key] is not None and g[key] > limit
        ]
        if over:
            out.append(f"{g['group'].removesuffix('/agg')} ({g['rows']} rows): {', '.join(over)}")
    return out


def targets(data: dict[str, Any]) -> str:
    """A markdown list of the targets, each with its figure and met / missed."""
    lines = ["## issue 19's targets", ""]

    def check(label: str, ok: bool, figure: str) -> None:
        lines.append(f"- {'met' if ok else 'MISSED'}: {label}: {figure}")

    held = data.get("held-out")
    if held is not None and held["agg_rows"]:
        pooled = held["pooled_agg"]
        for key, limit in POOLED.items():
            value = pooled[key]
            ok = value is not None and value <= limit
            check(f"held-out pooled {key[:4].upper()} MAPE <= {limit:g}%", ok, f"{value:.1f}%")
        over = _over(held["groups"], HELD_OUT_GROUP, MIN_GROUP_ROWS)
        check(f"no held-out group of >= {MIN_GROUP_ROWS} rows over TTFT 60% / TPOT 30%",
              not over, f"{len(over)} over")  # fmt: skip
        lines += [f"  - {o}" for o in over]
        ratios = [b["ttft_ratio"] for b in held["buckets"]["agg"].values() if b["rows"]]
        ok = all(RATIO[0] <= r <= RATIO[1] for r in ratios)
        check("median TTFT ratio per concurrency bucket in [0.8, 1.25]", ok,
              " / ".join(f"{r:.2f}" for r in ratios))  # fmt: skip
        share = held["agg_replayed"] / held["agg_rows"]
        check(f"held-out rows replayed >= {REPLAYED:.0%}", share >= REPLAYED,
              f"{held['agg_replayed']} of {held['agg_rows']} ({share:.0%})")  # fmt: skip
    cal = data.get("calibration")
    if cal is not None and cal["agg_rows"]:
        over = _over(cal["groups"], CALIBRATION_GROUP, 1)
        n = sum(1 for g in cal["groups"] if g["group"].endswith("/agg"))
        check("every calibration group within TTFT 20% / TPOT 10%", not over,
              f"{n - len(over)} of {n} within")  # fmt: skip
        lines += [f"  - {o}" for o in over]
    return "\n".join(lines) + "\n"
