"""Fit a calibration profile to measurements by replaying them in the simulator.

The parameters of one backend are ``theta = (base_us, per_request_us, per_token_us, prefill,
decode, host request_us, host input_token_us)`` (:mod:`dynosim.perf.calibration`). Every
engine step of a replay lasts ``decode * K_decode + prefill * K_prefill + base + per_request *
requests + per_token * tokens`` (``K_decode``: the kernel time of the step's decode requests,
``K_prefill``: what its prefill chunks add; see :class:`~dynosim.perf.overhead.CalibratedStepTime`)
and the host cost adds ``request_us + input_token_us * input tokens`` to a request's TTFT. In a
closed-loop benchmark (all clients start together, each sends its next request when the
previous completes) *which* requests share *which* steps does not depend on how long the steps
take, so each row's mean TTFT and TPOT are linear in ``theta``: ``y = A theta``. The design
matrix ``A`` comes from the simulator's own schedule: the row is replayed once per step term
with only that term switched on (a *probe*: e.g. 1 ms per step and nothing else; 10x the
kernel time and no overhead), which sums exactly that term over the steps each measured request
spent waiting and decoding. The host columns are the mean input length and 1.

Per backend, ``scipy.optimize.least_squares`` (bounded below by 0, ``soft_l1`` loss so a few
rows far off do not dominate) minimises the relative errors ``A theta / measured - 1`` of TTFT
and TPOT, with a weak prior pulling the kernel factors to 1 (they are only moved when the data
ask for it). The fit is checked by re-simulating every row with the fitted profile.
Leave-one-configuration-out: a configuration is one (model, GPU, backend, TP); each is
predicted (through ``A``) by the fit on the backend's other configurations, and the residual
spread ``sigma`` (standard deviation of ``log(simulated / measured)``) written to the profile is
that of these held-out predictions: the error to expect on a configuration not fitted on.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from dynosim.perf.calibration import (
    UNRECORDED_CLIENTS,
    BackendCalibration,
    CalibrationProfile,
    HostCalibration,
    StepCalibration,
)
from dynosim.validation.measurements import Measurement
from dynosim.validation.validate import assume_client, replay, row_requests

F64 = npt.NDArray[np.float64]
PARAMS = ("base_us", "per_request_us", "per_token_us", "prefill", "decode",
          "request_us", "input_token_us")  # fmt: skip
# One probe per step term: the step calibration, and the parameter value it stands for.
PROBES: tuple[tuple[StepCalibration, float], ...] = (
    (StepCalibration(base_us=1000.0, prefill=0.0, decode=0.0), 1000.0),
    (StepCalibration(per_request_us=100.0, prefill=0.0, decode=0.0), 100.0),
    (StepCalibration(per_token_us=10.0, prefill=0.0, decode=0.0), 10.0),
    (StepCalibration(prefill=10.0, decode=0.0), 10.0),
    (StepCalibration(prefill=0.0, decode=10.0), 10.0),
)
# A step whose probed term is zero still lasts 1 us (the protocol's floor); probes large against
# that floor (10x the kernel time, 1 ms per step...) keep its trace below 1e-4 of a metric.
_NO_HOST = HostCalibration()


@dataclass(frozen=True, slots=True)
class FitOptions:
    """What the fit may move and how it weighs the metrics.

    Attributes:
        fit_factors: Fit the per-phase kernel factors (else they stay 1).
        fit_host: Fit the host per-request cost (else it stays 0).
        ttft_weight: Weight of the TTFT equations (TPOT has 1).
        factor_prior: Weight of the prior ``factor = 1`` (one pseudo-equation per factor).
    """

    fit_factors: bool = True
    fit_host: bool = True
    ttft_weight: float = 1.0
    factor_prior: float = 3.0


@dataclass(slots=True)
class Design:
    """The linear model of the replayable rows of one backend."""

    rows: list[Measurement]
    ttft: F64  # (rows, params): mean TTFT in ms per unit of each parameter
    tpot: F64
    refused: list[tuple[Measurement, str]] = field(default_factory=list)

    @property
    def measured_ttft(self) -> F64:
        """Measured mean TTFT of each row (ms)."""
        return np.array([m.ttft_ms for m in self.rows])

    @property
    def measured_tpot(self) -> F64:
        """Measured mean TPOT of each row (ms)."""
        return np.array([m.tpot_ms for m in self.rows])

    def configuration(self, m: Measurement) -> tuple[str, str, str, int]:
        """The configuration a row belongs to: (model, GPU, backend, TP)."""
        return (m.model, m.gpu, m.backend, m.tp)


def design(
    rows: Sequence[Measurement],
    *,
    rounds: int = 4,
    timing: str = "aic",
    progress: Callable[[int, int], None] | None = None,
    unrecorded_client: str = "closed-loop",
    reuse: Design | None = None,
) -> Design:
    """Replay each row once per probe and build the design matrices (one backend's rows).

    Rows that record no client are replayed as ``unrecorded_client``. Rows that do record one
    replay the same whatever ``unrecorded_client`` is: with ``reuse`` (a design of the same
    rows for another client model) theirs are taken from it instead of replayed again.
    """
    done: dict[int, tuple[list[float], list[float], str | None]] = {}
    if reuse is not None:
        done = {id(m): (list(t), list(p), None)
                for m, t, p in zip(reuse.rows, reuse.ttft, reuse.tpot, strict=True)}  # fmt: skip
        done |= {id(m): ([], [], why) for m, why in reuse.refused}
    kept: list[Measurement] = []
    refused: list[tuple[Measurement, str]] = []
    ttft_rows: list[list[float]] = []
    tpot_rows: list[list[float]] = []
    for i, m in enumerate(rows):
        if m.client is not None and id(m) in done:
            t_row, p_row, why = done[id(m)]
            if why is not None:
                refused.append((m, why))
            else:
                kept.append(m)
                ttft_rows.append(t_row)
                tpot_rows.append(p_row)
            if progress is not None:
                progress(i + 1, len(rows))
            continue
        t_row, p_row, why = [], [], None
        for probe, unit in PROBES:
            r = replay(m, rounds=rounds, timing=timing, step=probe, host=_NO_HOST,
                       unrecorded_client=unrecorded_client)  # fmt: skip
            if r.refused is not None:
                why = r.refused
                break
            t_row.append(r.ttft_ms / unit)
            p_row.append(r.tpot_ms / unit)
        if progress is not None:
            progress(i + 1, len(rows))
        if why is not None:
            refused.append((m, why))
            continue
        requests, warmup = row_requests(assume_client(m, unrecorded_client), rounds)
        measured = requests[warmup:]
        isl = float(np.mean([q.input_tokens for q in measured])) if measured else float(m.isl)
        t_row += [1e-3, isl * 1e-3]  # host: us -> ms
        p_row += [0.0, 0.0]
        kept.append(m)
        ttft_rows.append(t_row)
        tpot_rows.append(p_row)
    shape = (len(kept), len(PARAMS))
    return Design(
        rows=kept,
        ttft=np.array(ttft_rows, dtype=np.float64).reshape(shape),
        tpot=np.array(tpot_rows, dtype=np.float64).reshape(shape),
        refused=refused,
    )


def fit_theta(d: Design, idx: npt.NDArray[np.intp], opts: FitOptions) -> F64:
    """Least-squares parameters on the rows ``idx`` of ``d`` (see the module docstring)."""
    free = np.ones(len(PARAMS), dtype=bool)
    if not opts.fit_factors:
        free[[3, 4]] = False
    if not opts.fit_host:
        free[[5, 6]] = False
    fixed = np.array([0, 0, 0, 1, 1, 0, 0], dtype=np.float64)
    at = d.ttft[idx] / d.measured_ttft[idx, None]
    ap = d.tpot[idx] / d.measured_tpot[idx, None]
    a = np.vstack([opts.ttft_weight * at, ap])
    b = np.concatenate([np.full(len(idx), opts.ttft_weight), np.ones(len(idx))])
    n = max(len(idx), 1)
    prior_rows, prior_b = [], []
    for k in (3, 4):
        if free[k]:
            row = np.zeros(len(PARAMS))
            row[k] = opts.factor_prior * math.sqrt(n) / math.sqrt(len(PARAMS))
            prior_rows.append(row)
            prior_b.append(row[k])
    if prior_rows:
        a = np.vstack([a, np.array(prior_rows)])
        b = np.concatenate([b, np.array(prior_b)])
    b = b - a[:, ~free] @ fixed[~free]
    a_free = a[:, free]
    # Solve for z = theta * scale, whose columns have comparable size (us and factors mix).
    scale = np.maximum(np.abs(a_free).max(axis=0), 1e-12)
    a_scaled = a_free / scale
    res = least_squares(
        lambda z: a_scaled @ z - b,
        x0=(fixed[free] + 0.1) * scale,
        jac=lambda z: a_scaled,
        bounds=(0.0, np.inf),
        loss="soft_l1",
        f_scale=0.1,
        method="trf",
    )
    theta = fixed.copy()
    theta[free] = res.x / scale
    return theta


def predict(d: Design, theta: F64) -> tuple[F64, F64]:
    """Predicted (TTFT, TPOT) in ms of every row of ``d`` with parameters ``theta``."""
    return d.ttft @ theta, d.tpot @ theta


def theta_calibration(theta: F64) -> tuple[StepCalibration, HostCalibration]:
    """The step and host calibrations of a parameter vector (rounded for the profile)."""
    step = StepCalibration(
        base_us=round(float(theta[0]), 2),
        per_request_us=round(float(theta[1]), 3),
        per_token_us=round(float(theta[2]), 4),
        prefill=round(float(theta[3]), 4),
        decode=round(float(theta[4]), 4),
    )
    host = HostCalibration(
        request_us=round(float(theta[5]), 1), input_token_us=round(float(theta[6]), 3)
    )
    return step, host


def calibration_theta(cal: BackendCalibration) -> F64:
    """The parameter vector of a backend calibration."""
    s, h = cal.step, cal.host
    return np.array([s.base_us, s.per_request_us, s.per_token_us, s.prefill, s.decode,
                     h.request_us, h.input_token_us], dtype=np.float64)  # fmt: skip


@dataclass(slots=True)
class BackendFit:
    """The fit of one backend: parameters, in-sample and held-out predictions."""

    backend: str
    design: Design
    theta: F64
    before: F64  # parameters of the starting profile
    loo_ttft: F64
    loo_tpot: F64

    def held_out_error(self) -> float:
        """Mean absolute relative error of the held-out TTFT plus that of the held-out TPOT."""
        t = np.abs(self.loo_ttft / self.design.measured_ttft - 1.0)
        p = np.abs(self.loo_tpot / self.design.measured_tpot - 1.0)
        return float(t.mean() + p.mean()) if t.size else math.inf

    def sigma(self) -> dict[str, float]:
        """Spread of log(held-out prediction / measured) per metric."""
        out = {}
        for name, pred, real in (("ttft", self.loo_ttft, self.design.measured_ttft),
                                 ("tpot", self.loo_tpot, self.design.measured_tpot)):  # fmt: skip
            ok = (pred > 0) & (real > 0)
            out[name] = round(float(np.std(np.log(pred[ok] / real[ok]))), 4) if ok.any() else 0.0
        return out


def fit_backend(d: Design, backend: str, before: F64, opts: FitOptions) -> BackendFit:
    """Fit on all rows of ``d``, and leave each configuration out in turn."""
    all_idx = np.arange(len(d.rows))
    theta = fit_theta(d, all_idx, opts)
    configs = [d.configuration(m) for m in d.rows]
    loo_t, loo_p = np.empty(len(d.rows)), np.empty(len(d.rows))
    pt, pp = predict(d, theta)
    for c in sorted(set(configs)):
        out = np.array([k == c for k in configs])
        if out.all():  # one configuration only: nothing to hold out against
            loo_t[out], loo_p[out] = pt[out], pp[out]
            continue
        th = fit_theta(d, all_idx[~out], opts)
        t, p = predict(d, th)
        loo_t[out], loo_p[out] = t[out], p[out]
    return BackendFit(backend, d, theta, before, loo_t, loo_p)


def mixed_design(
    rows: Sequence[Measurement], designs: dict[str, Design], default: str, chosen: dict[str, str]
) -> Design:
    """The design of ``rows``, each row that records no client from its source's client.

    That is ``chosen[source]``, else ``default``; rows that record a client are the same in
    every design.
    """
    index = {c: {id(m): i for i, m in enumerate(d.rows)} for c, d in designs.items()}
    why = {c: {id(m): r for m, r in d.refused} for c, d in designs.items()}
    kept, refused, ttft, tpot = [], [], [], []
    for m in rows:
        c = chosen.get(m.source, default) if m.client is None else default
        i = index[c].get(id(m))
        if i is None:
            if id(m) in why[c]:
                refused.append((m, why[c][id(m)]))
            continue
        kept.append(m)
        ttft.append(designs[c].ttft[i])
        tpot.append(designs[c].tpot[i])
    shape = (len(kept), len(PARAMS))
    return Design(
        rows=kept,
        ttft=np.array(ttft, dtype=np.float64).reshape(shape),
        tpot=np.array(tpot, dtype=np.float64).reshape(shape),
        refused=refused,
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
        before = calibration_theta(start.backend(backend))
        default, chosen, f = choose_clients(ms, designs, backend, before, opts)
        step, host = theta_calibration(f.theta)
        backends[backend] = BackendCalibration(
            step=step, host=host, sigma=f.sigma(), unrecorded_client=default,
            unrecorded_sources={s: c for s, c in chosen.items() if c != default},
        )  # fmt: skip
        fits.append(f)
    groups = sorted({"/".join(m.group[:3]) for f in fits for m in f.design.rows})
    fitted_on: dict[str, Any] = {
        "groups": groups,
        "rows": sum(len(f.design.rows) for f in fits),
        "sigma_from": "leave-one-configuration-out (model, gpu, backend, tp) predictions",
    }
    return CalibrationProfile(backends=backends, fitted_on=fitted_on), fits
