"""Least-squares fits of the linear model, per backend and per GPU generation.

:func:`fit_theta` fits ``theta`` on some rows of a :class:`~.linear.Design` (the step terms and
the host delays, per measurement file when it is big enough: :data:`SOURCE_HOST_ROWS`), with
the kernel factors kept in :data:`~.options.FACTOR_BOUNDS`; :func:`fit_backend` fits all rows
and leaves each configuration out in turn. The host's streaming cost is :mod:`.streaming`'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.optimize import least_squares

from dynosim.perf.calibration import gpu_generation
from dynosim.validation.calibrate.linear import (
    EXTRA_PARAMS,
    F64,
    PARAMS,
    STEP_PARAMS,
    SYNC_PARAMS,
    Design,
    host_matrix,
    predict,
)
from dynosim.validation.calibrate.options import FACTOR_PRIOR, FitOptions
from dynosim.validation.calibrate.solve import F_SCALE, bounded
from dynosim.validation.measurement import Measurement

__all__ = [
    "GENERATION_ROWS",
    "SOURCE_HOST_ROWS",
    "BackendFit",
    "fit_backend",
    "fit_generations",
    "fit_theta",
    "fit_theta_extra",
    "row_steps",
]


def fit_theta(
    d: Design,
    idx: npt.NDArray[np.intp],
    opts: FitOptions,
    own: Sequence[str] = (),
    slots: npt.NDArray[np.intp] | None = None,
) -> F64:
    """Least-squares parameters on the rows ``idx`` of ``d`` (:func:`fit_theta_extra`'s)."""
    return fit_theta_extra(d, idx, opts, own, slots)[0]


NO_EXTRA = (False,) * len(EXTRA_PARAMS)


def fit_theta_extra(
    d: Design,
    idx: npt.NDArray[np.intp],
    opts: FitOptions,
    own: Sequence[str] = (),
    slots: npt.NDArray[np.intp] | None = None,
    free_extra: Sequence[bool] = NO_EXTRA,
) -> tuple[F64, F64]:
    """Least-squares parameters on the rows ``idx`` of ``d`` (see the module docstring).

    With ``own`` sources (:func:`host_matrix`) the result has their host delays after the
    backend's. The backend's are what to expect of a file not fitted on: fitted on the rows of
    no own source when they are :data:`SOURCE_HOST_ROWS` or more, else refitted on all rows of
    ``idx`` (:func:`_host_delays`, with the step terms fitted): a few rows of small files say
    less about that than every file together.

    ``slots`` (one integer per row of ``d``, 0 to S - 1) fits S sets of step terms
    (:data:`STEP_PARAMS`), each on the rows of its slot, together with one set of host delays:
    the result is the S sets one after the other, then the host delays. A slot without rows
    in ``idx`` keeps the neutral terms (no overhead, kernel factors 1).

    ``free_extra`` (one flag per :data:`~.linear.EXTRA_PARAMS`): which of the terms fitted
    beside ``theta`` are fitted with it (bounded below by 0), where the rows ``idx`` can tell
    them: the synchronous overheads when some rows ran without async scheduling
    (:attr:`~.linear.Design.synchronous`), the per-layer overhead when the rows have models of
    two layer counts or more. They are returned second (0 where not fitted).
    """
    k = len(STEP_PARAMS)
    slot = np.zeros(len(d.rows), dtype=np.intp) if slots is None else slots
    n_slots = int(slot.max()) + 1 if len(slot) else 1
    base = len(PARAMS) + 2 * len(own)
    use = _extras(d, idx, free_extra)
    ns = len(use)
    et, ep = d.extra_columns()
    n_params = base + (n_slots - 1) * k + ns
    h0 = n_slots * k  # first host parameter
    nh = base - k  # host parameters (the backend's pair, then each own source's)

    def spread(a: F64, e: F64) -> F64:
        """``a``'s step columns moved to each row's slot; the extra columns ``e`` after all."""
        out = np.zeros((len(a), n_params))
        for j in range(n_slots):
            mine = slot[idx] == j
            out[mine, j * k : (j + 1) * k] = a[mine, :k]
        out[:, h0 : h0 + nh] = a[:, k:]
        out[:, h0 + nh :] = e[:, use]
        return out

    free = np.ones(n_params, dtype=bool)
    fixed = np.zeros(n_params)
    counts = np.bincount(slot[idx], minlength=n_slots)
    for j in range(n_slots):
        fixed[j * k + 4] = 1.0
        if not opts.fit_factors:
            free[[j * k + 3, j * k + 4]] = False
        if counts[j] == 0:
            free[j * k : (j + 1) * k] = False
    if not opts.fit_host:
        free[h0 : h0 + nh] = False
    att = host_matrix(d, own)
    at = spread(att[idx] / d.measured_ttft[idx, None], et[idx] / d.measured_ttft[idx, None])
    tp = np.zeros((len(idx), base))
    tp[:, : len(PARAMS)] = d.tpot[idx] / d.measured_tpot[idx, None]
    ap = spread(tp, ep[idx] / d.measured_tpot[idx, None])
    a = np.vstack([opts.ttft_weight * at, ap])
    b = np.concatenate([np.full(len(idx), opts.ttft_weight), np.ones(len(idx))])
    prior_rows, prior_b = [], []
    for j in range(n_slots):
        for q in (3, 4):
            if free[j * k + q]:
                row = np.zeros(n_params)
                row[j * k + q] = (
                    opts.factor_prior * math.sqrt(max(counts[j], 1)) / math.sqrt(len(PARAMS))
                )
                prior_rows.append(row)
                prior_b.append(row[j * k + q] * FACTOR_PRIOR[q])
    if prior_rows:
        a = np.vstack([a, np.array(prior_rows)])
        b = np.concatenate([b, np.array(prior_b)])
    factors = [j * k + 3 for j in range(n_slots) if free[j * k + 4]]
    theta = bounded(a, b, free, fixed, factors, opts.factor_bounds)
    rest = np.abs(att[idx, 5:7]).any(axis=1).sum()
    if own and opts.fit_host and rest < SOURCE_HOST_ROWS:
        full = spread(att[idx], et[idx])
        engine = full @ theta - full[:, h0 : h0 + nh] @ theta[h0 : h0 + nh]
        theta[h0 : h0 + 2] = _host_delays(engine, d.ttft[idx, 6] * 1e3, d.measured_ttft[idx],
                                          opts.ttft_weight)  # fmt: skip
    extra = np.zeros(len(EXTRA_PARAMS))
    extra[use] = theta[h0 + nh :]
    return theta[: h0 + nh], extra


def _extras(d: Design, idx: npt.NDArray[np.intp], free: Sequence[bool]) -> list[int]:
    """Which :data:`~.linear.EXTRA_PARAMS` are fitted on the rows ``idx`` (``free`` and told)."""
    if not len(idx):
        return []
    sync = bool(d.synchronous[idx].any())
    layered = len(set(d.layers[idx].tolist())) > 1
    told = [sync] * len(SYNC_PARAMS) + [layered]
    return [j for j, (f, t) in enumerate(zip(free, told, strict=True)) if f and t]


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
    generations: dict[str, F64] = field(default_factory=dict)  # step terms per GPU generation
    extra: F64 = field(default_factory=lambda: np.zeros(len(EXTRA_PARAMS)))  # EXTRA_PARAMS

    @property
    def sync(self) -> F64:
        """The synchronous overheads (:data:`~.linear.SYNC_PARAMS`; 0: none fitted)."""
        return self.extra[: len(SYNC_PARAMS)]

    @property
    def per_layer_us(self) -> float:
        """The step overhead per decoder layer (0: none fitted)."""
        return float(self.extra[len(SYNC_PARAMS)])

    @property
    def source_hosts(self) -> dict[str, tuple[float, float]]:
        """Each own source's host delays ``(request_us, input_token_us)``."""
        n = len(PARAMS)
        return {s: (float(self.theta[n + 2 * j]), float(self.theta[n + 2 * j + 1]))
                for j, s in enumerate(self.own)}  # fmt: skip

    def fitted(self) -> tuple[F64, F64]:
        """In-sample (TTFT, TPOT) of the linear model (without the streaming cost)."""
        steps = row_steps(self.design, self.theta, self.generations)
        return predict(self.design, self.theta, self.own, steps, self.extra)

    def loss(self, ttft_weight: float = 1.0) -> float:
        """The fit's robust loss in sample, without the kernel factors' prior.

        That is :func:`~.solve.bounded`'s ``soft_l1`` of the relative errors of TTFT (weighted
        ``ttft_weight``) and TPOT.
        """
        t, p = self.fitted()
        d = self.design
        r = np.concatenate([ttft_weight * (t / d.measured_ttft - 1), p / d.measured_tpot - 1])
        return float((2 * (np.sqrt(1 + (r / F_SCALE) ** 2) - 1)).sum())

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


GENERATION_ROWS = 24
"""A GPU generation gets step terms of its own (:func:`fit_generations`) when the fit has at
least this many of its rows, from two configurations or more (the rule of
:data:`SOURCE_HOST_ROWS`: enough rows that one configuration can be held out)."""


def fit_generations(
    d: Design,
    idx: npt.NDArray[np.intp],
    opts: FitOptions,
    own: Sequence[str],
    theta: F64,
    extra: F64 | None = None,
    free_extra: Sequence[bool] = NO_EXTRA,
) -> tuple[F64, dict[str, F64], F64]:
    """Step terms (:data:`STEP_PARAMS`) of each GPU generation the rows ``idx`` support.

    Why per generation: the framework's work per step (Python scheduling, sampling, CUDA-graph
    launches) runs on another host CPU and GPU on a Blackwell node than on a Hopper one, and
    each backend picks other kernels per architecture than the ones AIConfigurator timed, so
    the overheads and kernel factors fitted on one generation need not hold on another. Each
    generation of :func:`~dynosim.perf.calibration.gpu_generation` with at least
    :data:`GENERATION_ROWS` rows of two configurations or more among ``idx`` gets terms of
    its own, fitted on its rows by :func:`fit_theta` (same loss, same prior on the kernel
    factors) jointly with the host delays, which stay one set for the backend; when the rows
    are all of one generation there is nothing to tell apart and the backend's terms are its.

    Returns ``theta`` with the host delays of the joint fit (its step terms, the backend's,
    stay those of ``theta``: what a GPU of another generation runs with), the terms of
    each generation (empty: ``theta`` unchanged) and the extra terms (:func:`fit_theta_extra`'s
    ``free_extra``, refitted jointly; ``extra``, else zeros, when nothing is refitted).
    """
    none = extra if extra is not None else np.zeros(len(EXTRA_PARAMS))
    gens = [gpu_generation(m.gpu) or "" for m in d.rows]
    present = sorted({gens[i] for i in idx})
    kept = [
        g
        for g in present
        if g
        and len(present) > 1
        and sum(gens[i] == g for i in idx) >= GENERATION_ROWS
        and len({d.configuration(d.rows[i]) for i in idx if gens[i] == g}) >= 2
    ]
    if not kept:
        return theta, {}, none
    slots = np.array([kept.index(g) + 1 if g in kept else 0 for g in gens], dtype=np.intp)
    joint, joint_extra = fit_theta_extra(d, idx, opts, own, slots, free_extra)
    k = len(STEP_PARAMS)
    out = theta.copy()
    out[k:] = joint[(len(kept) + 1) * k :]
    return out, {g: joint[(j + 1) * k : (j + 2) * k] for j, g in enumerate(kept)}, joint_extra


def row_steps(d: Design, theta: F64, generations: dict[str, F64]) -> F64:
    """The step terms each row of ``d`` runs with: its generation's, else ``theta``'s."""
    steps = np.tile(theta[: len(STEP_PARAMS)], (len(d.rows), 1))
    for i, m in enumerate(d.rows):
        own = generations.get(gpu_generation(m.gpu) or "")
        if own is not None:
            steps[i] = own
    return steps


def fit_backend(d: Design, backend: str, before: F64, opts: FitOptions) -> BackendFit:
    """Fit on all rows of ``d``, and leave each configuration out in turn.

    With ``opts.source_hosts`` each big enough measurement file of rows that record no client
    (:func:`_own_sources`) has host delays of its own: the TTFT floor a harness adds (its
    HTTP client, where it tokenises, what it counts) is the campaign's, as its client is.
    With ``opts.generations`` the step terms are fitted per GPU generation where the rows
    support it (:func:`fit_generations`); a held-out configuration whose generation then has
    too few rows left is predicted with the backend's terms.

    The terms fitted beside ``theta`` (:data:`~.linear.EXTRA_PARAMS`: the overheads of
    engines without async scheduling, with ``opts.synchronous``; the overhead per decoder
    layer, with ``opts.per_layer``) are each tried on and off, and the fit with the smallest
    leave-one-configuration-out error (:meth:`BackendFit.held_out_error`) is kept, the one
    with fewer terms on a tie: terms the rows cannot predict other configurations with are
    noise.
    """
    own = _own_sources(d.rows) if opts.source_hosts and opts.fit_host else []
    n_sync = len(SYNC_PARAMS)
    # A term seen in one group only (one model on one GPU) cannot be tested on another: the
    # leave-one-configuration-out error then only asks it to predict that group's other TP
    # sizes, and it absorbs whatever else that group does (a 32 ms "synchronous" step for the
    # one vLLM 0.12 calibration group, which no engine's scheduling costs). Tried from two.
    sync = [False, True] if opts.synchronous and d.synchronous_groups > 1 else [False]
    layer = [False, True] if opts.per_layer and len(set(d.layers.tolist())) > 1 else [False]
    fits = [
        _fit_backend(d, backend, before, opts, own, free=(s,) * n_sync + (y,))
        for s in sync
        for y in layer
    ]
    return min(fits, key=lambda f: f.held_out_error())


def _fit_backend(
    d: Design,
    backend: str,
    before: F64,
    opts: FitOptions,
    own: list[str],
    *,
    free: Sequence[bool],
) -> BackendFit:
    """:func:`fit_backend` with the extra terms ``free`` (:data:`~.linear.EXTRA_PARAMS`)."""
    all_idx = np.arange(len(d.rows))

    def fit(idx: npt.NDArray[np.intp]) -> tuple[F64, dict[str, F64], F64]:
        th, extra = fit_theta_extra(d, idx, opts, own, free_extra=free)
        if not opts.generations:
            return th, {}, extra
        return fit_generations(d, idx, opts, own, th, extra, free)

    theta, gens, extra = fit(all_idx)
    loo_t, loo_p = np.empty(len(d.rows)), np.empty(len(d.rows))
    pt, pp = predict(d, theta, own, row_steps(d, theta, gens), extra)
    for out in _configurations(d):
        if out.all():  # one configuration only: nothing to hold out against
            loo_t[out], loo_p[out] = pt[out], pp[out]
            continue
        th, g, ex = fit(all_idx[~out])
        t, p = predict(d, th, own, row_steps(d, th, g), ex)
        loo_t[out], loo_p[out] = t[out], p[out]
    return BackendFit(backend, d, theta, before, loo_t, loo_p, own=own, generations=gens,
                      extra=extra)  # fmt: skip


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
