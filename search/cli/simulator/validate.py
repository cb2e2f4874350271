"""``dynosim validate MEASUREMENTS [--json OUT] [--html OUT]``: the simulator vs measurements."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from dynosim.errors import DynosimError
from search.cli.shared import (
    add_context_arguments,
    check_groups,
    group_filter,
    make_console,
    matches,
    measurement_context,
    writing,
)


def add_parser(p: argparse.ArgumentParser) -> None:
    """Arguments of ``dynosim validate``."""
    p.add_argument("measurements", type=Path,
                   help="AIConfigurator silicon_sample.csv, or a CSV with model,gpu,backend,tp,"
                        "isl,osl,concurrency,ttft_ms,tpot_ms")  # fmt: skip
    p.add_argument("--json", type=Path, help="write the groups and rows as JSON here")
    p.add_argument("--html", type=Path, help="write measured vs simulated plots (plotly) here")
    p.add_argument("--group", action="append", default=[], metavar="MODEL/SYSTEM/BACKEND",
                   help="only this group (repeatable; a part may be empty)")  # fmt: skip
    p.add_argument("--max-rows", type=int, help="replay at most N rows (after --group)")
    p.add_argument("--rows", action="store_true",
                   help="print each row: measured and simulated TTFT/TPOT, its client")  # fmt: skip
    p.add_argument("--rounds", type=int, default=4,
                   help="requests per client without a named client (default 4)")  # fmt: skip
    p.add_argument("--timing", choices=["aic", "roofline"], default="aic")
    add_context_arguments(p)
    p.add_argument(
        "--calibration",
        type=Path,
        metavar="PROFILE.yaml",
        help="replay with this calibration profile (default: the shipped one)",
    )
    p.add_argument(
        "--host-in-sim",
        action="store_true",
        help="give the profile's host cost to the simulated host (dynosim.host) instead of "
        "adding it to TTFT",
    )
    p.add_argument(
        "--markdown",
        type=Path,
        help="write the per-group table as Markdown here (the README fidelity table)",
    )


def run(args: argparse.Namespace) -> int:
    """Replay the rows, print one line per group, write JSON if asked."""
    from rich.table import Table

    from dynosim.checks import integer
    from dynosim.perf.calibration import load_profile
    from dynosim.validation.measurements import check_replay, read_measurements
    from dynosim.validation.validate import validate
    from dynosim.workload.limits import MAX_CLIENTS, MAX_MEASUREMENT_ROWS, MAX_ROUNDS

    if args.max_rows is not None:
        integer("--max-rows", args.max_rows, 1, MAX_MEASUREMENT_ROWS)
    integer("--rounds", args.rounds, 1, MAX_ROUNDS)
    if args.concurrency is not None:
        integer("--concurrency", args.concurrency, 1, MAX_CLIENTS)
    wanted = [group_filter(g) for g in args.group]
    every = read_measurements(args.measurements, measurement_context(args))
    check_groups(args.group, [m.group for m in every], args.measurements)
    rows = [m for m in every if not wanted or any(matches(m.group, w) for w in wanted)]
    if args.max_rows is not None:
        rows = rows[: args.max_rows]
    if not rows:
        raise DynosimError(f"{args.measurements}: no row to replay (after --group)")
    check_replay(rows, args.rounds)
    console = make_console()
    with console.status(f"replaying {len(rows):,} rows...") as status:

        def progress(i: int, n: int) -> None:
            status.update(f"replaying row {i:,} of {n:,}...")

        profile = load_profile(args.calibration)
        groups = validate(rows, rounds=args.rounds, timing=args.timing, profile=profile,
                          host_in_sim=args.host_in_sim, progress=progress,
                          unrecorded_client=args.unrecorded_client)  # fmt: skip
    summaries = [g.summary() for g in groups]
    t = Table(title=f"simulated vs measured: {args.measurements.name}", title_justify="left")
    for col in ("model", "system", "backend", "mode", "rows", "replayed", "TTFT MAPE %",
                "TTFT bias %", "TPOT MAPE %", "TPOT bias %"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("model", "system", "backend", "mode")
                     else "right", no_wrap=True)  # fmt: skip
    for s in summaries:
        t.add_row(s["model"], s["system"], s["backend"], s["mode"], str(s["rows"]),
                  str(s["replayed"]), *(_pct(s[k]) for k in ("ttft_mape", "ttft_bias",
                                                            "tpot_mape", "tpot_bias")))  # fmt: skip
    console.print(t)
    for line in assumptions(rows, profile, args.unrecorded_client, args.timing, args.rounds):
        console.print(line, highlight=False, markup=False)
    if args.rows:
        console.print(rows_table(groups))
    refused = sum(s["refused"] for s in summaries)
    if refused == len(rows):
        reasons = sorted({r for s in summaries for r in s["refused_reasons"]})
        raise DynosimError(f"{args.measurements}: no row could be replayed; e.g. {reasons[0]}")
    if refused:
        reasons = sorted({r for s in summaries for r in s["refused_reasons"]})
        console.print(f"[yellow]{refused} rows refused; e.g. {reasons[0]}[/yellow]")
    if args.json is not None:
        payload = {"measurements": str(args.measurements), "groups": summaries,
                   "rows": [_row(r) for g in groups for r in g.rows]}  # fmt: skip
        with writing("--json", args.json):
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(payload, indent=2) + "\n")
        console.print(f"groups written to {args.json}")
    if args.markdown is not None:
        with writing("--markdown", args.markdown):
            args.markdown.write_text(markdown_table(summaries))
        console.print(f"table written to {args.markdown}")
    if args.html is not None:
        from search.results.pages.validation import write_validation

        with writing("--html", args.html):
            write_validation(
                groups, args.html, title=f"simulated vs measured: {args.measurements.name}"
            )
        console.print(f"plots written to {args.html}")
    return 0


def client_text(m: Any, rounds: int) -> str:
    """How the client that replays ``m`` (after ``assume_client``) sends its requests."""
    warm = "no warm-up" if not m.warmups else f"{m.warmups} warm-up requests"
    if m.client is None:
        return (f"a lock-step closed loop of `concurrency` clients, each sending its next "
                f"request when its previous ends ({rounds} requests each, {warm})")  # fmt: skip
    text = {
        "inferencex": "InferenceX's benchmark_serving (--max-concurrency c --request-rate inf, "
        "lengths uniform in [0.8, 1] x nominal, 10 x c prompts)",
        "vllm-bench": "vllm bench serve --max-concurrency c (fixed lengths, 1000 prompts)",
        "aiperf": "aiperf profile --concurrency c (fixed lengths)",
    }.get(m.client, m.client)
    if m.queued:
        text += f", {m.queued} stream(s) more than the engine admits (each request queues)"
    return f"{text}, {warm}"


def engine_text(m: Any, timing: str) -> str:
    """The engine flags a row is replayed with (``max_num_seqs`` relative to its concurrency)."""
    from dynosim.validation.validate import row_config

    try:
        config = row_config(m, timing)
    except DynosimError as exc:
        return f"(none: {exc})"
    e = config.engine
    per_rank = m.concurrency // max(1, m.attention_dp)
    seqs = "concurrency" if e.max_num_seqs == per_rank else str(e.max_num_seqs)
    if e.max_num_seqs == per_rank and m.attention_dp > 1:
        seqs += " per DP rank"
    return (f"{config.backend} max_num_seqs = {seqs}, max_num_batched_tokens "
            f"{e.max_num_batched_tokens}, block_size {e.block_size}, prefix caching "
            f"{'on' if e.enable_prefix_caching else 'off'}, chunked prefill "
            f"{'on' if e.enable_chunked_prefill else 'off'}")  # fmt: skip


def assumptions(
    rows: list[Any], profile: Any, unrecorded: str | None, timing: str, rounds: int
) -> list[str]:
    """One line per input kind: the client model and engine flags its rows are replayed with.

    A kind is the client a row records or, for rows that record none, their source (the
    calibration profile may name a client model per source).
    """
    from dynosim.validation.validate import assume_client

    count: dict[tuple[str, str, str], int] = {}
    for m in rows:
        if m.refused is not None:
            continue
        chosen = unrecorded or profile.backend(m.backend).client_for(m.source)
        r = assume_client(m, chosen)
        kind = (f"rows measured by {m.client}" if m.client is not None
                else f"rows that record no client (source {m.source or 'not named'}: "
                f"replayed as {chosen})")  # fmt: skip
        key = (kind, client_text(r, rounds), engine_text(r, timing))
        count[key] = count.get(key, 0) + 1
    return [f"assumed for {n} {kind}: client {client}; engine {engine}"
            for (kind, client, engine), n in count.items()]  # fmt: skip


def rows_table(groups: list[Any]) -> Any:
    """Every row: where, shape, client, measured and simulated TTFT and TPOT (``--rows``)."""
    from rich.table import Table

    t = Table(title="rows", title_justify="left")
    for col in ("row", "model", "system", "backend", "tp", "isl", "osl", "c", "client",
                "TTFT ms", "sim", "err %", "TPOT ms", "sim", "err %"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("row", "model", "system", "backend",
                                                    "client") else "right")  # fmt: skip
    for g in groups:
        for r in g.rows:
            m = r.m
            client = m.client or "closed-loop"
            client += " (queued)" if m.queued else ""
            cells = [m.where, m.model, m.gpu, m.backend, str(m.tp), str(m.isl), str(m.osl),
                     str(m.concurrency), client]  # fmt: skip
            if r.refused:
                t.add_row(*cells, f"{m.ttft_ms:.1f}", "refused", "", f"{m.tpot_ms:.2f}", "",
                          r.refused[:40])  # fmt: skip
                continue
            for measured, sim, fmt in (
                (m.ttft_ms, r.ttft_ms, ".1f"),
                (m.tpot_ms, r.tpot_ms, ".2f"),
            ):
                err = 100.0 * (sim - measured) / measured if measured else math.nan
                cells += [f"{measured:{fmt}}", f"{sim:{fmt}}", _pct(err)]
            t.add_row(*cells)
    return t


def markdown_table(summaries: list[dict[str, Any]]) -> str:
    """The per-group figures as a Markdown table (replayed groups only).

    A group of another mode than ``agg`` has it after its backend: ``sglang (disagg)``.
    """
    lines = ["| model | GPU | backend | rows | TTFT MAPE % | TTFT bias % | TPOT MAPE % | "
             "TPOT bias % |", "|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for s in summaries:
        if not s["replayed"]:
            continue
        cells = [_pct(s[k]) for k in ("ttft_mape", "ttft_bias", "tpot_mape", "tpot_bias")]
        mode = s.get("mode", "agg")
        backend = s["backend"] if mode == "agg" else f"{s['backend']} ({mode})"
        lines.append(f"| {s['model']} | {s['system']} | {backend} | {s['replayed']} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}" if v < 0 else f"{v:.1f}"


def _row(r: Any) -> dict[str, Any]:
    m = r.m

    def num(x: float) -> float | None:
        return x if math.isfinite(x) else None

    pools = None if m.pools is None else {
        name: {"workers": p.workers, "tp": p.tp, "ep": p.ep, "moe_tp": p.moe_tp,
               "attention_dp": p.attention_dp, "batch_size": p.batch_size}
        for name, p in zip(("prefill", "decode"), m.pools, strict=True)
    }  # fmt: skip
    return {"where": m.where, "model": m.model, "system": m.gpu, "backend": m.backend,
            "mode": m.mode, "pools": pools, "tp": m.tp, "isl": m.isl, "osl": m.osl,
            "concurrency": m.concurrency,
            "client": m.client or ("queued" if m.queued else None),
            "measured_ttft_ms": m.ttft_ms, "measured_tpot_ms": m.tpot_ms,
            "simulated_ttft_ms": num(r.ttft_ms), "simulated_tpot_ms": num(r.tpot_ms),
            "refused": r.refused}  # fmt: skip
