"""Fit a calibration profile to measurements by replaying them in the simulator.

The parameters of one backend are ``theta = (base_us, per_request_us, per_token_us, prefill -
decode, decode, host request_us, host input_token_us)`` (:mod:`dynosim.perf.calibration`).
Every engine step of a replay lasts ``decode * K + (prefill - decode) * K_prefill + base +
per_request * requests + per_token * tokens`` (``K``: the step's kernel time, ``K_prefill``:
its prefill chunks' share; see :class:`~dynosim.perf.overhead.CalibratedStepTime`, whose split
of a mixed step is this one when ``prefill >= decode``, which the fit therefore keeps: both
parameters are bounded below by 0) and the host cost adds ``request_us + input_token_us * input
tokens`` to a request's TTFT (the backend's pair, or that of the row's measurement file when it
has enough rows of its own: :func:`fit_backend`). In a closed-loop benchmark (all clients start
together, each sends its next request when the previous completes) *which* requests share
*which* steps does not depend on how long the steps take, so each row's mean TTFT and TPOT are
linear in ``theta``: ``y = A theta``. The design matrix ``A`` comes from the simulator's own
schedule: the row is replayed once per step term with only that term switched on (a *probe*:
e.g. 1 ms per step and nothing else; 10x the prefill chunks' share; 10x the kernel time), which
sums exactly that term over the steps each measured request spent waiting and decoding. The
host columns are the mean input length and 1.

Per backend, ``scipy.optimize.least_squares`` (bounded below by 0, ``soft_l1`` loss so a few
rows far off do not dominate) minimises the relative errors ``A theta / measured - 1`` of TTFT
and TPOT, with a weak prior pulling both kernel factors to 1 (they are only moved when the
data ask for it). The fit is checked by re-simulating every row with the fitted profile.
Leave-one-configuration-out: a configuration is one (model, GPU, backend, TP); each is
predicted (through ``A``) by the fit on the backend's other configurations, and the residual
spread ``sigma`` (standard deviation of ``log(simulated / measured)``) written to the profile is
that of these held-out predictions: the error to expect on a configuration not fitted on.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from dynosim.perf.calibration import (
    UNRECORDED_CLIENTS,
    BackendCalibration,
    CalibrationProfile,
    HostCalibration,
    SourceCalibration,
    StepCalibration,
)
from dynosim.validation.measurement import Measurement
from dynosim.validation.validate import assume_client, replay, row_requests

F64 = npt.NDArray[np.float64]
PARAMS = ("base_us", "per_request_us", "per_token_us", "prefill_over_decode", "decode",
          "request_us", "input_token_us")  # fmt: skip
FACTOR_PRIOR = {3: 0.0, 4: 1.0}
"""What the prior pulls the kernel-factor parameters to: prefill = decode = 1."""
# One probe per step term: the step calibration, and the parameter value it stands for.
PROBES: tuple[tuple[StepCalibration, float], ...] = (
    (StepCalibration(base_us=1000.0, prefill=0.0, decode=0.0), 1000.0),
    (StepCalibration(per_request_us=100.0, prefill=0.0, decode=0.0), 100.0),
    (StepCalibration(per_token_us=10.0, prefill=0.0, decode=0.0), 10.0),
    (StepCalibration(prefill=10.0, decode=0.0), 10.0),
    (StepCalibration(prefill=10.0, decode=10.0), 10.0),
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
        fit_streaming: Also fit the host's streaming cost per output token
            (:func:`fit_host`; only with ``fit_host``).
        source_hosts: Fit host delays per measurement file (:func:`fit_host`; only with
            ``fit_host``).
    """

    fit_factors: bool = True
    fit_host: bool = True
    ttft_weight: float = 1.0
    factor_prior: float = 3.0
    fit_streaming: bool = True
    source_hosts: bool = True


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
        if m.pools is not None:  # its schedule moves with the KV transfers: not linear
            refused.append((m, "disaggregated rows are validated, not fitted"))
            if progress is not None:
                progress(i + 1, len(rows))
            continue
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


def host_matrix(d: Design, own: Sequence[str] = ()) -> F64:
    """The TTFT design with a pair of host columns per source of ``own``.

    A row of such a source that records no client has its host columns (request, input
    tokens) moved from the backend's pair to its source's, which follow :data:`PARAMS` in
    the order of ``own``.
    """
    a = np.zeros((len(d.rows), len(PARAMS) + 2 * len(own)))
    a[:, : len(PARAMS)] = d.ttft
    pos = {s: len(PARAMS) + 2 * j for j, s in enumerate(own)}
    for i, m in enumerate(d.rows):
        j = pos.get(m.source) if m.client is None else None
        if j is not None:
            a[i, j : j + 2] = a[i, 5:7]
            a[i, 5:7] = 0.0
    return a


def fit_theta(
    d: Design, idx: npt.NDArray[np.intp], opts: FitOptions, own: Sequence[str] = ()
) -> F64:
    """Least-squares parameters on the rows ``idx`` of ``d`` (see the module docstring).

    With ``own`` sources (:func:`host_matrix`) the result has their host delays after the
    backend's. The backend's are what to expect of a file not fitted on: fitted on the rows of
    no own source when they are :data:`SOURCE_HOST_ROWS` or more, else refitted on all rows of
    ``idx`` (:func:`_host_delays`, with the step terms fitted): a few rows of small files say
    less about that than every file together.
    """
    n_params = len(PARAMS) + 2 * len(own)
    free = np.ones(n_params, dtype=bool)
    if not opts.fit_factors:
        free[[3, 4]] = False
    if not opts.fit_host:
        free[5:] = False
    fixed = np.zeros(n_params)
    fixed[4] = 1.0
    att = host_matrix(d, own)
    at = att[idx] / d.measured_ttft[idx, None]
    ap = np.zeros((len(idx), n_params))
    ap[:, : len(PARAMS)] = d.tpot[idx] / d.measured_tpot[idx, None]
    a = np.vstack([opts.ttft_weight * at, ap])
    b = np.concatenate([np.full(len(idx), opts.ttft_weight), np.ones(len(idx))])
    n = max(len(idx), 1)
    prior_rows, prior_b = [], []
    for k in (3, 4):
        if free[k]:
            row = np.zeros(n_params)
            row[k] = opts.factor_prior * math.sqrt(n) / math.sqrt(len(PARAMS))
            prior_rows.append(row)
            prior_b.append(row[k] * FACTOR_PRIOR[k])
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
    rest = np.abs(att[idx, 5:7]).any(axis=1).sum()
    if own and opts.fit_host and rest < SOURCE_HOST_ROWS:
        engine = att[idx] @ theta - att[idx, 5:] @ theta[5:]
        theta[5:7] = _host_delays(engine, d.ttft[idx, 6] * 1e3, d.measured_ttft[idx],
                                  opts.ttft_weight)  # fmt: skip
    return theta


def predict(d: Design, theta: F64, own: Sequence[str] = ()) -> tuple[F64, F64]:
    """Predicted (TTFT, TPOT) in ms of every row of ``d`` with parameters ``theta``.

    ``theta`` has the host delays of each source of ``own`` after :data:`PARAMS`'s.
    """
    return host_matrix(d, own) @ theta, d.tpot @ theta[: len(PARAMS)]


def theta_calibration(theta: F64) -> tuple[StepCalibration, HostCalibration]:
    """The step and host calibrations of a parameter vector (rounded for the profile)."""
    step = StepCalibration(
        base_us=round(float(theta[0]), 2),
        per_request_us=round(float(theta[1]), 3),
        per_token_us=round(float(theta[2]), 4),
        prefill=round(float(theta[3] + theta[4]), 4),
        decode=round(float(theta[4]), 4),
    )
    host = HostCalibration(
        request_us=round(float(theta[5]), 1), input_token_us=round(float(theta[6]), 3)
    )
    return step, host


def calibration_theta(cal: BackendCalibration) -> F64:
    """The parameter vector of a backend calibration."""
    s, h = cal.step, cal.host
    return np.array([s.base_us, s.per_request_us, s.per_token_us, s.prefill - s.decode,
                     s.decode, h.request_us, h.input_token_us], dtype=np.float64)  # fmt: skip


@dataclass(slots=True)
class BackendFit:
    """The fit of one backend: parameters, in-sample and held-out predictions."""

    backend: str
    design: Design
    theta: F64  # PARAMS, then the host delays of each source of ``own``
    before: F64  # parameters of the starting profile
    loo_ttft: F64
    loo_tpot: F64
    output_token_us: float = 0.0  # the host's streaming cost (fitted by :func:`fit_host`)
    own: list[str] = field(default_factory=list)  # sources with host delays of their own

    @property
    def source_hosts(self) -> dict[str, tuple[float, float]]:
        """Each own source's host delays ``(request_us, input_token_us)``."""
        n = len(PARAMS)
        return {s: (float(self.theta[n + 2 * j]), float(self.theta[n + 2 * j + 1]))
                for j, s in enumerate(self.own)}  # fmt: skip

    def fitted(self) -> tuple[F64, F64]:
        """In-sample (TTFT, TPOT) of the linear model (without the streaming cost)."""
        return predict(self.design, self.theta, self.own)

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


def _configurations(d: Design) -> Iterator[npt.NDArray[np.bool_]]:
    """The rows of each configuration of ``d`` (leave-one-configuration-out), in sorted order."""
    configs = [d.configuration(m) for m in d.rows]
    for c in sorted(set(configs)):
        yield np.array([k == c for k in configs])


def fit_backend(d: Design, backend: str, before: F64, opts: FitOptions) -> BackendFit:
    """Fit on all rows of ``d``, and leave each configuration out in turn.

    With ``opts.source_hosts`` each big enough measurement file of rows that record no client
    (:func:`_own_sources`) has host delays of its own: the TTFT floor a harness adds (its
    HTTP client, where it tokenises, what it counts) is the campaign's, as its client is.
    """
    own = _own_sources(d.rows) if opts.source_hosts and opts.fit_host else []
    all_idx = np.arange(len(d.rows))
    theta = fit_theta(d, all_idx, opts, own)
    loo_t, loo_p = np.empty(len(d.rows)), np.empty(len(d.rows))
    pt, pp = predict(d, theta, own)
    for out in _configurations(d):
        if out.all():  # one configuration only: nothing to hold out against
            loo_t[out], loo_p[out] = pt[out], pp[out]
            continue
        th = fit_theta(d, all_idx[~out], opts, own)
        t, p = predict(d, th, own)
        loo_t[out], loo_p[out] = t[out], p[out]
    return BackendFit(backend, d, theta, before, loo_t, loo_p, own=own)


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


STREAMING_GRID_US = (0.0, 30.0, 60.0, 75.0, 90.0, 105.0, 120.0, 150.0)
"""Streaming costs per output token :func:`fit_streaming` tries (microseconds of one process;
the module docstring of :mod:`dynosim.host` has the published figures, 60-100 us)."""
STREAMING_GAIN = 0.005
"""How much smaller (TTFT + TPOT mean absolute relative error) a streaming cost must make the
fit to be kept: rows whose token rates never load the host leave it unidentified at 0."""


def _host_delays(engine_ttft: F64, isl: F64, measured: F64, weight: float) -> tuple[float, float]:
    """The per-request host delay ``(request_us, input_token_us)`` that best fits the TTFT.

    It is added to the simulated ``engine_ttft`` (ms, per row of mean prompt ``isl``) to
    give ``measured``; the same robust least squares as :func:`fit_theta`, on the two host
    columns alone.
    """
    a = np.column_stack([np.full_like(isl, 1e-3), isl * 1e-3]) / measured[:, None] * weight
    b = (1.0 - engine_ttft / measured) * weight
    scale = np.maximum(np.abs(a).max(axis=0), 1e-12)
    res = least_squares(lambda z: (a / scale) @ z - b, x0=np.full(2, 0.1), bounds=(0.0, np.inf),
                        loss="soft_l1", f_scale=0.1, method="trf")  # fmt: skip
    r, per_token = res.x / scale
    return float(r), float(per_token)


SOURCE_HOST_ROWS = 24
"""A measurement file gets host delays of its own (:func:`fit_host`) when the fit has at least
this many of its rows, from two configurations or more (so that one can be held out)."""


def _own_sources(rows: Sequence[Measurement]) -> list[str]:
    """The sources of rows that record no client big enough for host delays of their own."""
    configs: dict[str, set[tuple[str, str, str, int]]] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for m in rows:
        if m.client is None:
            configs[m.source].add((m.model, m.gpu, m.backend, m.tp))
            counts[m.source] += 1
    return sorted(s for s in counts if counts[s] >= SOURCE_HOST_ROWS and len(configs[s]) > 1)


def _delays(
    t: F64,
    isl: F64,
    real: F64,
    sources: list[str | None],
    own: list[str],
    keep: npt.NDArray[np.bool_],
    weight: float,
) -> tuple[F64, F64]:
    """Host delays fitted on the rows ``keep``, as :func:`fit_theta` fits them.

    Returns the delay of every row (ms) and the delays in the order of ``theta[5:]``: the
    backend's (from the rows of no own source, or all of ``keep`` when they are fewer than
    :data:`SOURCE_HOST_ROWS`), then each own source's.
    """
    src = np.array([s or "" for s in sources], dtype=object)
    theirs = np.isin(src, own) if own else np.zeros(len(src), dtype=bool)
    rest = keep & ~theirs
    base = rest if rest.sum() >= SOURCE_HOST_ROWS or not own else keep
    pairs = [_host_delays(t[base], isl[base], real[base], weight)]
    for s in own:
        idx = keep & (src == s)
        pairs.append(_host_delays(t[idx], isl[idx], real[idx], weight) if idx.any() else pairs[0])
    where = {s: j + 1 for j, s in enumerate(own)}
    per_row = np.array([pairs[where.get(s or "", 0)] for s in sources]).reshape(-1, 2)
    delay = (per_row[:, 0] + per_row[:, 1] * isl) * 1e-3
    return delay, np.array(pairs).ravel()


def fit_host(
    f: BackendFit,
    cal: BackendCalibration,
    *,
    rounds: int = 4,
    timing: str = "aic",
    opts: FitOptions | None = None,
    grid: Sequence[float] = STREAMING_GRID_US,
    progress: Callable[[int, int], None] | None = None,
) -> BackendFit:
    """The host's streaming cost per output token.

    A server streams every output token through its own process (one by default: vLLM's API
    server, SGLang's tokenizer manager, ``trtllm-serve`` without post-processing workers). At
    high token rates that process saturates and every token waits behind the others, which in a
    closed loop holds back the next requests: TTFT grows far beyond the engine's, TPOT follows
    the process's pace. That is not linear in any parameter, so it is fitted outside the
    design: with the fitted step calibration, each row (of the own sources ``f.own``, whose
    cost it becomes: the server build is the campaign's; without own sources every row, for the
    backend) is simulated at every cost of ``grid`` (the host's queue in the simulation,
    :mod:`dynosim.host`), the per-request delays (the backend's and each own source's,
    ``f.own``) are refitted to the TTFT so obtained (:func:`_delays`), and the cost whose TTFT
    + TPOT mean absolute relative error is smallest is kept if it beats 0 by
    :data:`STREAMING_GAIN` (``opts.fit_streaming`` off: ``f`` as it is). The held-out
    predictions move by what the streaming and the delays change in each row, the delays
    refitted without the row's configuration.
    """
    opts = opts or FitOptions()
    d = f.design
    isl = d.ttft[:, 6] * 1e3
    real_t, real_p = d.measured_ttft, d.measured_tpot
    sources: list[str | None] = [m.source if m.client is None else None for m in d.rows]
    everything = np.ones(len(d.rows), dtype=bool)
    costs = [a for a in grid if a == 0.0 or opts.fit_streaming]
    if len(costs) < 2:
        return f
    streamed = [s in f.own for s in sources] if f.own else [True] * len(d.rows)
    runs: dict[float, tuple[F64, F64, float]] = {}
    for k, a in enumerate(costs):
        t, p = np.empty(len(d.rows)), np.empty(len(d.rows))
        for i, m in enumerate(d.rows):
            stream = HostCalibration(output_token_us=a if streamed[i] else 0.0)
            r = replay(m, rounds=rounds, timing=timing, step=cal.step, host=stream,
                       unrecorded_client=cal.client_for(m.source))  # fmt: skip
            t[i], p[i] = r.ttft_ms, r.tpot_ms
        if progress is not None:
            progress(k + 1, len(costs))
        if not (np.isfinite(t).all() and np.isfinite(p).all()):
            continue
        delay, _ = _delays(t, isl, real_t, sources, f.own, everything, opts.ttft_weight)
        error = float(np.abs((t + delay) / real_t - 1).mean() + np.abs(p / real_p - 1).mean())
        runs[a] = (t, p, error)
    if 0.0 not in runs:
        return f
    best = min(runs, key=lambda a: runs[a][2])
    if best == 0.0 or runs[best][2] > runs[0.0][2] - STREAMING_GAIN:
        return f
    t, p, _ = runs[best]
    t0, p0, _ = runs[0.0]
    theta = f.theta.copy()
    linear_host = host_matrix(d, f.own)[:, 5:] @ theta[5:]
    _, theta[5:] = _delays(t, isl, real_t, sources, f.own, everything, opts.ttft_weight)
    loo_delay = np.empty(len(d.rows))
    for out in _configurations(d):
        keep = ~out if (~out).any() else everything
        delay, _ = _delays(t, isl, real_t, sources, f.own, keep, opts.ttft_weight)
        loo_delay[out] = delay[out]
    loo_t = f.loo_ttft - linear_host + (t - t0) + loo_delay
    return BackendFit(f.backend, d, theta, f.before, loo_t, f.loo_tpot + (p - p0),
                      output_token_us=best, own=f.own)  # fmt: skip


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
        sources = {s: SourceCalibration(client=c) for s, c in chosen.items() if c != default}
        cal = BackendCalibration(step=step, host=host, unrecorded_client=default, sources=sources)
        if opts.fit_host:
            f = fit_host(f, cal, rounds=rounds, timing=timing, opts=opts)
            step, host = theta_calibration(f.theta)
            if not f.own:
                host = replace(host, output_token_us=round(f.output_token_us, 1))
        for s, (req, per_token) in f.source_hosts.items():
            sources[s] = SourceCalibration(
                client=chosen.get(s, default),
                request_us=round(req, 1),
                input_token_us=round(per_token, 3),
                output_token_us=round(f.output_token_us, 1),
            )
        backends[backend] = replace(cal, host=host, sigma=f.sigma(), sources=sources)
        fits.append(f)
    groups = sorted({"/".join(m.group[:3]) for f in fits for m in f.design.rows})
    fitted_on: dict[str, Any] = {
        "groups": groups,
        "rows": sum(len(f.design.rows) for f in fits),
        "sigma_from": "leave-one-configuration-out (model, gpu, backend, tp) predictions",
    }
    return CalibrationProfile(backends=backends, fitted_on=fitted_on), fits
