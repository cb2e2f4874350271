"""``dynosim calibrate MEASUREMENTS --out PROFILE.yaml``: fit the simulator to measurements.

Fits, per backend, the step overhead (fixed, per request, per token), the per-phase kernel
factors, the host per-request cost and the host's streaming cost per output token
(:mod:`dynosim.validation.calibrate`), prints the TTFT
and TPOT error per group before, after (re-simulated with the fitted profile) and
leave-one-configuration-out, and writes the profile a deployment uses with
``calibration: PROFILE.yaml``. Each kernel factor is kept in its physical range
(``--factor-bounds``, default 0.5 to 2: :mod:`dynosim.validation.calibrate.options`). The
shipped default profile is regenerated on issue 19's 11 calibration groups by
``benchmarks/calibrate_overhead.py --out dynosim/perf/profiles/default.yaml`` (the
``dynosim calibrate`` command it runs is written into the profile's header).
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np

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
    """Arguments of ``dynosim calibrate``."""
    p.add_argument("measurements", type=Path,
                   help="measurements (any format dynosim validate reads)")  # fmt: skip
    p.add_argument("--out", type=Path, required=True, help="write the fitted profile here")
    p.add_argument("--group", action="append", default=[], metavar="MODEL/SYSTEM/BACKEND",
                   help="fit only on this group (repeatable; a part may be empty)")  # fmt: skip
    add_context_arguments(p)
    p.add_argument(
        "--start",
        type=Path,
        help="profile whose values backends without rows keep (default: shipped)",
    )
    p.add_argument("--no-factors", action="store_true", help="keep the kernel factors at 1")
    p.add_argument("--no-host", action="store_true", help="keep the host cost at 0")
    p.add_argument("--no-streaming", action="store_true",
                   help="keep the host's streaming cost per output token at 0")  # fmt: skip
    p.add_argument("--factor-prior", type=float, default=0.3,
                   help="weight of the prior 'kernel factor = 1' (default 0.3)")  # fmt: skip
    p.add_argument("--factor-bounds", type=float, nargs=2, metavar=("LOW", "HIGH"),
                   help="range the fitted kernel factors are kept in (default 0.5 2, their "
                   "physical range: see dynosim.validation.calibrate.options)")  # fmt: skip
    p.add_argument("--ttft-weight", type=float, default=1.0,
                   help="weight of TTFT against TPOT in the fit (default 1)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=4,
                   help="requests per client without a named client (default 4)")  # fmt: skip
    p.add_argument("--timing", choices=["aic", "roofline"], default="aic")
    p.add_argument("--json", type=Path, help="write the before/after/held-out figures here")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the re-simulation with the fitted profile")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Fit, print the errors, write the profile."""
    from dynosim.checks import integer, number
    from dynosim.perf.calibration import load_profile
    from dynosim.validation.calibrate import FACTOR_BOUNDS, FitOptions, calibrate
    from dynosim.validation.calibrate.options import check_factor_bounds
    from dynosim.validation.measurements import check_replay, read_measurements
    from dynosim.workload.limits import MAX_CLIENTS, MAX_FIT_WEIGHT, MAX_ROUNDS

    for name in ("factor_prior", "ttft_weight"):  # a weight of the least-squares fit
        number(f"--{name.replace('_', '-')}", getattr(args, name), 0, MAX_FIT_WEIGHT)
    integer("--rounds", args.rounds, 1, MAX_ROUNDS)
    bounds = tuple(args.factor_bounds) if args.factor_bounds else FACTOR_BOUNDS
    check_factor_bounds("--factor-bounds", bounds)
    if args.concurrency is not None:
        integer("--concurrency", args.concurrency, 1, MAX_CLIENTS)
    start = load_profile(args.start)
    wanted = [group_filter(g) for g in args.group]
    every = read_measurements(args.measurements, measurement_context(args))
    check_groups(args.group, [m.group for m in every], args.measurements)
    rows = [m for m in every if m.refused is None
            and (not wanted or any(matches(m.group, w) for w in wanted))]  # fmt: skip
    if not rows:
        raise DynosimError(f"{args.measurements}: no replayable rows (after --group)")
    check_replay(rows, args.rounds)
    opts = FitOptions(fit_factors=not args.no_factors, fit_host=not args.no_host,
                      ttft_weight=args.ttft_weight, factor_prior=args.factor_prior,
                      fit_streaming=not args.no_streaming, factor_bounds=bounds)  # fmt: skip
    console = make_console()
    with console.status("replaying the probes...") as status:

        def progress(backend: str, i: int, n: int) -> None:
            status.update(f"{backend}: probes of row {i:,} of {n:,}...")

        profile, fits = calibrate(rows, start=start, rounds=args.rounds, timing=args.timing,
                                  opts=opts, progress=progress,
                                  unrecorded_client=args.unrecorded_client)  # fmt: skip
    if not any(f.design.rows for f in fits):
        from dynosim.validation.validate import replay

        m, why = next((r for f in fits for r in f.design.refused), (rows[0], None))
        why = why or replay(m, rounds=1, timing=args.timing, profile=start).refused
        raise DynosimError(f"{args.measurements}: no row could be replayed; e.g. {m.where}: {why}")
    command = _command(args)
    profile = type(profile)(
        backends=profile.backends,
        fitted_on={"measurements": args.measurements.name, **profile.fitted_on},
    )
    with writing("--out", args.out):
        args.out.parent.mkdir(parents=True, exist_ok=True)
        profile.write(args.out, header=f"dynosim calibration profile, written by:\n  {command}")
    figures = _figures(fits)
    if not args.no_verify:
        with console.status("re-simulating with the fitted profile..."):
            _verify(figures, fits, args)
    console.print(_table(figures, f"calibration on {args.measurements.name}: MAPE % (bias %)"))
    for f in fits:
        b = profile.backend(f.backend)
        console.print(f"{f.backend}: step {_fmt(b.step)}; host {_fmt(b.host)}; "
                      f"sigma {dict(b.sigma)}; rows without a client replayed as "
                      f"{b.unrecorded_client}")  # fmt: skip
        for line in _extra_lines(f, b):
            console.print(line)
        for source, own in sorted(b.sources.items()):
            h = b.host_for(source)
            console.print(f"  those of {source}: {own.client}, host request_us="
                          f"{h.request_us:g}, input_token_us={h.input_token_us:g}, "
                          f"output_token_us={h.output_token_us:g}")  # fmt: skip
    for f in fits:
        if f.design.refused:
            m, why = f.design.refused[0]
            console.print(f"[yellow]{len(f.design.refused)} {f.backend} rows could not be "
                          f"replayed; e.g. {m.where}: {why}[/yellow]")  # fmt: skip
    lonely = [f.backend for f in fits if f.design.rows and _n_configurations(f) < 2]
    for backend in lonely:
        console.print(f"[yellow]{backend}: one configuration (model, gpu, backend, tp) only: "
                      "no held-out figures (they need a configuration to leave out), and its "
                      "sigma is the in-sample spread, not a held-out one[/yellow]")  # fmt: skip
    for line in factor_warnings(profile, [f.backend for f in fits]):
        console.print(f"[yellow]{line}[/yellow]")
    console.print("held out = leave-one-configuration-out (model, gpu, backend, tp) predictions")
    console.print(f"profile written to {args.out}")
    if args.json is not None:
        with writing("--json", args.json):
            args.json.write_text(json.dumps({"groups": figures, "profile": profile.to_dict()},
                                            indent=2, default=_jsonable) + "\n")  # fmt: skip
    return 0


def _figures(fits: list[Any]) -> dict[str, dict[str, Any]]:
    """Per group: the errors before (starting profile), fitted and held out (linear model)."""
    from dynosim.validation.calibrate import group_errors, predict

    figures: dict[str, dict[str, Any]] = {}
    for f in fits:
        d = f.design
        labels = [("before", predict(d, f.before)), ("fit", f.fitted())]
        if _n_configurations(f) >= 2:  # one configuration has nothing to leave out
            labels.append(("held_out", (f.loo_ttft, f.loo_tpot)))
        for label, (t, p) in labels:
            for g, e in group_errors(d.rows, t, p).items():
                figures.setdefault("/".join(g[:3]), {})[label] = e
    return figures


def factor_warnings(profile: Any, backends: list[str]) -> list[str]:
    """One line per kernel factor (a backend's or a GPU generation's) outside the physical range.

    That is :data:`~dynosim.validation.calibrate.options.FACTOR_BOUNDS` (the fit keeps to it
    unless ``--factor-bounds`` widens it): beyond it the kernel data or the replay is off, not
    the engine.
    """
    from dynosim.validation.calibrate import FACTOR_BOUNDS

    lo, hi = FACTOR_BOUNDS
    out = []
    for backend in backends:
        cal = profile.backend(backend)
        for where, step in (("", cal.step), *((f" ({g})", s) for g, s in cal.generations.items())):
            for name in ("prefill", "decode"):
                value = float(getattr(step, name))
                if not lo <= value <= hi:
                    out.append(
                        f"{backend}{where}: fitted {name} kernel factor {value:.3g} is outside "
                        f"[{lo:g}, {hi:g}]: the step times are being stretched rather than "
                        "explained; check the measurements' client, GPU and engine flags"
                    )
    return out


def _extra_lines(fit: Any, cal: Any) -> list[str]:
    """What the fit says of the terms beside its step terms.

    That is, of the rows without async scheduling and of the overhead per decoder layer.
    """
    out = []
    n = int(fit.design.synchronous.sum())
    if cal.synchronous is not None:
        from dynosim.perf.calibration import SYNC_KEYS

        terms = {k: getattr(cal.synchronous, k) for k in SYNC_KEYS}
        out.append(f"  without async scheduling ({n} rows): step + {terms}")
    elif n:
        why = ("fitted, they predicted the held-out configurations worse"
               if fit.design.synchronous_groups > 1
               else "one group has such rows: no other group could test them")  # fmt: skip
        out.append(f"  without async scheduling ({n} rows): no overheads of their own ({why})")
    if cal.per_layer_us:
        out.append(f"  per decoder layer of the model: step + {cal.per_layer_us:g} us")
    return out


def _n_configurations(fit: Any) -> int:
    """Distinct configurations (model, gpu, backend, tp) among a backend fit's rows."""
    return len({fit.design.configuration(m) for m in fit.design.rows})


def _verify(figures: dict[str, dict[str, Any]], fits: list[Any], args: argparse.Namespace) -> None:
    """Re-simulate the fitted rows with the written profile: the ``after`` figures."""
    from dynosim.perf.calibration import load_profile
    from dynosim.validation.validate import validate

    rows = [m for f in fits for m in f.design.rows]
    profile = load_profile(args.out)
    for g in validate(rows, rounds=args.rounds, timing=args.timing, profile=profile):
        figures.setdefault("/".join(g.key[:3]), {})["after"] = g.summary()


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this fit (written into the profile's header)."""
    words = ["dynosim", "calibrate", str(args.measurements)]
    words += [w for g in args.group for w in ("--group", g)] + ["--out", str(args.out)]
    for flag in ("no_factors", "no_host", "no_streaming"):
        words += [f"--{flag.replace('_', '-')}"] if getattr(args, flag) else []
    words += ["--factor-prior", f"{args.factor_prior:g}", "--ttft-weight", f"{args.ttft_weight:g}"]
    if args.factor_bounds:
        words += ["--factor-bounds", *(f"{b:g}" for b in args.factor_bounds)]
    return " ".join(map(shlex.quote, words))


def _table(figures: dict[str, dict[str, Any]], title: str) -> Any:
    """Before / after / held-out MAPE (bias) per group."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("group", "rows", "TTFT before", "TTFT after", "TTFT held out", "TPOT before",
                "TPOT after", "TPOT held out"):  # fmt: skip
        t.add_column(col, justify="left" if col == "group" else "right", no_wrap=True)
    for g, fig in figures.items():
        after = fig.get("after", fig["fit"])

        def cell(e: dict[str, Any], metric: str) -> str:
            return f"{e[metric + '_mape']:.1f} ({e[metric + '_bias']:+.1f})"

        held = fig.get("held_out")
        t.add_row(g, str(int(fig["fit"]["rows"])), cell(fig["before"], "ttft"),
                  cell(after, "ttft"), cell(held, "ttft") if held else "n/a (1 config)",
                  cell(fig["before"], "tpot"), cell(after, "tpot"),
                  cell(held, "tpot") if held else "n/a (1 config)")  # fmt: skip
    return t


def _fmt(obj: Any) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in
                     ((k, getattr(obj, k)) for k in obj.__dataclass_fields__))  # fmt: skip


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(type(x).__name__)
