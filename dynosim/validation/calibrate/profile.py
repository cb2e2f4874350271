"""Fit a calibration profile: per backend, the client model of each source and the fits.

:func:`calibrate` is ``dynosim calibrate``: per backend it builds the designs of its rows (one
per candidate client model of the rows that record none), picks each source's client model
(:func:`choose_clients`), fits (:mod:`.fit`) and writes the result as a
:class:`~dynosim.perf.calibration.CalibrationProfile`. :func:`group_errors` summarises
predictions per group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dynosim.perf.calibration import (
    UNRECORDED_CLIENTS,
    BackendCalibration,
    CalibrationProfile,
    SourceCalibration,
    StepCalibration,
)
from dynosim.validation.calibrate.fit import BackendFit, fit_backend
from dynosim.validation.calibrate.linear import (
    F64,
    PARAMS,
    Design,
    calibration_theta,
    design,
    step_calibration,
    theta_calibration,
)
from dynosim.validation.calibrate.options import FitOptions
from dynosim.validation.calibrate.streaming import fit_host
from dynosim.validation.measurement import Measurement

__all__ = ["calibrate", "choose_clients", "group_errors", "mixed_design"]


def mixed_design(
    rows: Sequence[Measurement], designs: dict[str, Design], default: str, chosen: dict[str, str]
) -> Design:
    """The design of ``rows``, each row that records no client from its source's client.

    That is ``chosen[source]``, else ``default``; rows that record a client are the same in
    every design.
    """
    index = {c: {id(m): i for i, m in enumerate(d.rows)} for c, d in designs.items()}
    why = {c: {id(m): r for m, r in d.refused} for c, d in designs.items()}
    alt = all(d.alt_ttft is not None and d.alt_tpot is not None for d in designs.values())
    kept, refused, ttft, tpot, alt_t, alt_p = [], [], [], [], [], []
    for m in rows:
        c = chosen.get(m.source, default) if m.client is None else default
        i = index[c].get(id(m))
        if i is None:
            if id(m) in why[c]:
                refused.append((m, why[c][id(m)]))
            continue
        kept.append(m)
        d = designs[c]
        ttft.append(d.ttft[i])
        tpot.append(d.tpot[i])
        if alt and d.alt_ttft is not None and d.alt_tpot is not None:
            alt_t.append(d.alt_ttft[i])
            alt_p.append(d.alt_tpot[i])
    shape = (len(kept), len(PARAMS))
    sides = {d.decode_first for d in designs.values()}
    if len(sides) != 1:
        raise ValueError("designs of both splits mixed")
    return Design(
        rows=kept,
        ttft=np.array(ttft, dtype=np.float64).reshape(shape),
        tpot=np.array(tpot, dtype=np.float64).reshape(shape),
        refused=refused,
        alt_ttft=np.array(alt_t, dtype=np.float64) if alt else None,
        alt_tpot=np.array(alt_p, dtype=np.float64) if alt else None,
        decode_first=sides.pop(),
    )


def choose_clients(
    rows: Sequence[Measurement],
    designs: dict[str, Design],
    backend: str,
    before: F64,
    opts: FitOptions,
) -> tuple[str, dict[str, str], BackendFit]:
    """The client model of each source of rows that record none, and the fit with them.

    First the one client for every source whose fit has the smallest held-out error (the
    backend's default, for sources not fitted on); then, source by source (in sorted order,
    until nothing changes), another client where it makes that error smaller. Returns the
    default, the client of each source, and the fit.
    """
    sources = sorted({m.source for m in rows if m.client is None})

    def fit(default: str, chosen: dict[str, str]) -> BackendFit:
        return fit_backend(mixed_design(rows, designs, default, chosen), backend, before, opts)

    fits = {c: fit(c, {}) for c in designs}
    default = min(designs, key=lambda c: fits[c].held_out_error())
    chosen = dict.fromkeys(sources, default)
    best = fits[default]
    changed = len(designs) > 1 and len(sources) > 1
    while changed:
        changed = False
        for source in sources:
            for c in designs:
                if c == chosen[source]:
                    continue
                trial = fit(default, chosen | {source: c})
                if trial.held_out_error() < best.held_out_error() - 1e-9:
                    chosen[source], best, changed = c, trial, True
    return default, chosen, best


def _either_split(
    rows: Sequence[Measurement],
    designs: dict[str, Design],
    backend: str,
    start: BackendCalibration,
    opts: FitOptions,
) -> tuple[str, dict[str, str], BackendFit]:
    """:func:`choose_clients` on each split of a mixed step's kernel time; the better one.

    A fit of one split keeps its two kernel factors in its order (``prefill >= decode``,
    or with :data:`~.linear.DECODE_PROBE` ``prefill <= decode``), each bounded below by the
    other, so a backend whose rows ask for a decode factor above its prefill one (vLLM's:
    TTFT pulls prefill down, TPOT decode up; issue 19) was held at ``prefill = decode`` by the
    first. Both are one model (they meet at ``prefill = decode``), so fitting it is fitting
    each split and keeping the better optimum: the second is kept when its fit has a decode
    factor above the prefill one (backend or GPU generation; at equality it is a point of the
    first split, whose own optimum is at least as good) and a smaller robust loss on these
    rows (:meth:`~.fit.BackendFit.loss`). Designs built without the decode probe fit the
    first only.
    """
    first = choose_clients(rows, designs, backend, calibration_theta(start), opts)
    if not all(d.alt_ttft is not None for d in designs.values()):
        return first
    other = {c: d.other_side() for c, d in designs.items()}
    second = choose_clients(rows, other, backend, calibration_theta(start, True), opts)
    f = second[2]
    apart = max(float(t[3]) for t in (f.theta, *f.generations.values())) > 1e-6
    if apart and f.loss(opts.ttft_weight) < first[2].loss(opts.ttft_weight):
        return second
    return first


def synchronous(f: BackendFit) -> StepCalibration | None:
    """The fit's overheads of an engine without async scheduling (None: it had no such rows)."""
    if not f.sync.any():  # no such rows, or their own terms did not predict better
        return None
    base, per_request, per_token = (float(x) for x in f.sync)
    return StepCalibration(base_us=round(base, 2), per_request_us=round(per_request, 3),
                           per_token_us=round(per_token, 4))  # fmt: skip


def group_errors(
    rows: Sequence[Measurement], ttft: F64, tpot: F64
) -> dict[tuple[str, str, str, str], dict[str, float]]:
    """MAPE and bias (percent) of TTFT and TPOT per (model, GPU, backend, mode)."""
    by: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    for i, m in enumerate(rows):
        by[m.group].append(i)
    out = {}
    for g, idx in by.items():
        t = np.array([ttft[i] / rows[i].ttft_ms - 1 for i in idx])
        p = np.array([tpot[i] / rows[i].tpot_ms - 1 for i in idx])
        out[g] = {"rows": float(len(idx)), "ttft_mape": 100 * float(np.abs(t).mean()),
                  "ttft_bias": 100 * float(t.mean()), "tpot_mape": 100 * float(np.abs(p).mean()),
                  "tpot_bias": 100 * float(p.mean())}  # fmt: skip
    return out


def calibrate(
    rows: Sequence[Measurement],
    *,
    start: CalibrationProfile,
    rounds: int = 4,
    timing: str = "aic",
    opts: FitOptions | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    unrecorded_client: str | None = None,
) -> tuple[CalibrationProfile, list[BackendFit]]:
    """Fit a profile on ``rows`` (per backend); backends without rows keep ``start``'s values.

    Rows that record no client are fitted as ``unrecorded_client``, or (None) as each of
    :data:`~dynosim.perf.calibration.UNRECORDED_CLIENTS`, keeping the better held-out fit.

    Returns the fitted profile (its ``fitted_on`` names the groups and row count; ``sigma``
    from the held-out predictions) and the per-backend fits (designs and predictions).
    """
    opts = opts or FitOptions()
    by_backend: dict[str, list[Measurement]] = defaultdict(list)
    for m in rows:
        if m.refused is None:
            by_backend[m.backend].append(m)
    fits = []
    backends = dict(start.backends)
    for backend, ms in sorted(by_backend.items()):

        def step_progress(i: int, n: int, backend: str = backend) -> None:
            if progress is not None:
                progress(backend, i, n)

        # Rows that record no client: each candidate client model is replayed, and each source
        # (measurement file) of such rows gets the one that makes the held-out
        # (leave-one-configuration-out) TTFT + TPOT error of the backend's fit smallest.
        clients: tuple[str, ...] = ("closed-loop",)
        if any(m.client is None for m in ms):
            clients = (unrecorded_client,) if unrecorded_client else UNRECORDED_CLIENTS
        designs: dict[str, Design] = {}
        d = None
        for client in clients:
            d = design(ms, rounds=rounds, timing=timing, progress=step_progress,
                       unrecorded_client=client, reuse=d)  # fmt: skip
            designs[client] = d
        if d is None or not d.rows:
            continue
        default, chosen, f = _either_split(ms, designs, backend, start.backend(backend), opts)
        first = f.design.decode_first
        step, host = theta_calibration(f.theta, first)
        sources = {s: SourceCalibration(client=c) for s, c in chosen.items() if c != default}
        gens = {g: step_calibration(v, first) for g, v in f.generations.items()}
        cal = BackendCalibration(step=step, host=host, unrecorded_client=default, sources=sources,
                                 generations=gens, synchronous=synchronous(f),
                                 per_layer_us=round(f.per_layer_us, 3))  # fmt: skip
        if opts.fit_host:
            f = fit_host(f, cal, rounds=rounds, timing=timing, opts=opts)
            step, host = theta_calibration(f.theta, first)
            if not f.own:
                host = replace(host, output_token_us=round(f.output_token_us, 1))
        for s, (req, per_token) in f.source_hosts.items():
            sources[s] = SourceCalibration(
                client=chosen.get(s, default),
                request_us=round(req, 1),
                input_token_us=round(per_token, 3),
                output_token_us=round(f.output_token_us, 1),
            )
        # the physical floor is a modelling choice, not a fitted term: the start's is kept
        # (the probes are linear and never use it: CalibratedStepTime)
        floor = start.backend(backend).roofline_floor
        backends[backend] = replace(cal, host=host, sigma=f.sigma(), sources=sources,
                                    roofline_floor=floor)  # fmt: skip
        fits.append(f)
    groups = sorted({"/".join(m.group[:3]) for f in fits for m in f.design.rows})
    fitted_on: dict[str, Any] = {
        "groups": groups,
        "rows": sum(len(f.design.rows) for f in fits),
        "sigma_from": "leave-one-configuration-out (model, gpu, backend, tp) predictions",
    }
    return CalibrationProfile(backends=backends, fitted_on=fitted_on), fits
