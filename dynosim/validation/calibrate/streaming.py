"""The host's streaming cost per output token, fitted by re-simulating on a grid.

:func:`fit_host` adds to a :class:`~.fit.BackendFit` the cost per streamed token of the
server's front-end process (:mod:`dynosim.host`), which is not linear in any parameter of the
design, and refits the per-request host delays (:func:`~.fit.fit_theta`'s, by
:func:`_delays`) to the TTFT so simulated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

import dynosim.validation.calibrate.fit as _fit
from dynosim.perf.calibration import BackendCalibration, HostCalibration
from dynosim.validation.calibrate.fit import BackendFit, _configurations, _host_delays
from dynosim.validation.calibrate.linear import F64, host_matrix
from dynosim.validation.calibrate.options import FitOptions
from dynosim.validation.validate import overlapped, replay, row_layers

__all__ = ["STREAMING_GAIN", "STREAMING_GRID_US", "fit_host"]

STREAMING_GRID_US = (0.0, 30.0, 60.0, 75.0, 90.0, 105.0, 120.0, 150.0)
"""Streaming costs per output token :func:`fit_host` tries (microseconds of one process;
the module docstring of :mod:`dynosim.host` has the published figures, 60-100 us)."""
STREAMING_GAIN = 0.005
"""How much smaller (TTFT + TPOT mean absolute relative error) a streaming cost must make the
fit to be kept: rows whose token rates never load the host leave it unidentified at 0."""


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
    :data:`~.fit.SOURCE_HOST_ROWS`), then each own source's.
    """
    src = np.array([s or "" for s in sources], dtype=object)
    theirs = np.isin(src, own) if own else np.zeros(len(src), dtype=bool)
    rest = keep & ~theirs
    base = rest if rest.sum() >= _fit.SOURCE_HOST_ROWS or not own else keep
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
            step = cal.step_for(m.gpu, overlapped(m), row_layers(m))
            r = replay(m, rounds=rounds, timing=timing, step=step, host=stream,
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
                      output_token_us=best, own=f.own, generations=f.generations,
                      extra=f.extra)  # fmt: skip
