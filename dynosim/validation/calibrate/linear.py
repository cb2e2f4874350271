"""The linear model of one backend's rows: the probes, the design matrices, predictions.

Each row's mean TTFT and TPOT are linear in the parameters ``theta`` (:data:`PARAMS`; the
package docstring of :mod:`dynosim.validation.calibrate` says why): :func:`design` replays each
row once per probe (:data:`PROBES`) to build the matrices, :func:`predict` applies a
``theta``, and :func:`theta_calibration` / :func:`calibration_theta` convert between ``theta``
and a profile's step and host calibrations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dynosim.errors import ConfigError
from dynosim.perf.calibration import BackendCalibration, HostCalibration, StepCalibration
from dynosim.perf.catalog import model_spec
from dynosim.validation.measurement import Measurement
from dynosim.validation.validate import assume_client, overlapped, replay, row_requests

__all__ = [
    "DECODE_PROBE",
    "EXTRA_PARAMS",
    "PARAMS",
    "PROBES",
    "STEP_PARAMS",
    "SYNC_PARAMS",
    "Design",
    "calibration_theta",
    "design",
    "host_matrix",
    "predict",
    "step_calibration",
    "theta_calibration",
]

F64 = npt.NDArray[np.float64]
PARAMS = ("base_us", "per_request_us", "per_token_us", "prefill_over_decode", "decode",
          "request_us", "input_token_us")  # fmt: skip
STEP_PARAMS = PARAMS[:5]
"""The step terms of ``theta`` (the rest are the host delays)."""
SYNC_PARAMS = PARAMS[:3]
"""The step overheads an engine without async scheduling pays on top (a profile's
``synchronous`` section): fitted beside ``theta`` on the rows of such engines, whose columns
for them are their own overhead columns (:attr:`Design.synchronous`)."""
EXTRA_PARAMS = ("sync_base_us", "sync_per_request_us", "sync_per_token_us", "per_layer_us")
"""Terms fitted beside ``theta`` (:meth:`Design.extra_columns`): the :data:`SYNC_PARAMS` of an
engine without async scheduling, then the step overhead per decoder layer of the model (a
profile's ``per_layer_us``)."""
# One probe per step term: the step calibration, and the parameter value it stands for.
PROBES: tuple[tuple[StepCalibration, float], ...] = (
    (StepCalibration(base_us=1000.0, prefill=0.0, decode=0.0), 1000.0),
    (StepCalibration(per_request_us=100.0, prefill=0.0, decode=0.0), 100.0),
    (StepCalibration(per_token_us=10.0, prefill=0.0, decode=0.0), 10.0),
    (StepCalibration(prefill=10.0, decode=0.0), 10.0),
    (StepCalibration(prefill=10.0, decode=10.0), 10.0),
)
DECODE_PROBE: tuple[StepCalibration, float] = (StepCalibration(prefill=0.0, decode=10.0), 10.0)
"""The probe of the other split (``prefill < decode``): 10x the decodes' own kernel time.

:class:`~dynosim.perf.overhead.CalibratedStepTime` splits a mixed step's kernel time ``K``
two ways. With ``prefill >= decode`` (the probes of :data:`PROBES`) the decodes' share is what
they add to the chunks, and the price is ``decode * K + (prefill - decode) * K_prefill``; with
``prefill < decode`` their share ``K_decode`` is their own time, and the price is ``prefill *
K + (decode - prefill) * K_decode``. The two are the same linear model with column 3 swapped
(``K_prefill`` for ``K_decode``) and the two factors' roles exchanged, so a design that also
holds this column (:attr:`Design.alt_ttft`) is fitted on either side
(:meth:`Design.other_side`) and the fit keeps the better (:func:`~.profile.calibrate`)."""
# A step whose probed term is zero still lasts 1 us (the protocol's floor); probes large against
# that floor (10x the kernel time, 1 ms per step...) keep its trace below 1e-4 of a metric.
_NO_HOST = HostCalibration()


@dataclass(slots=True)
class Design:
    """The linear model of the replayable rows of one backend."""

    rows: list[Measurement]
    ttft: F64  # (rows, params): mean TTFT in ms per unit of each parameter
    tpot: F64
    refused: list[tuple[Measurement, str]] = field(default_factory=list)
    # The other split's column 3 (:data:`DECODE_PROBE`), per row; None: not replayed.
    alt_ttft: F64 | None = None
    alt_tpot: F64 | None = None
    decode_first: bool = False  # column 3 is ``decode - prefill`` over ``K_decode``, 4 prefill

    def other_side(self) -> Design:
        """The same rows with the other split (:data:`DECODE_PROBE`): column 3 swapped.

        Raises:
            ValueError: the design holds no second split (built without its probe).
        """
        if self.alt_ttft is None or self.alt_tpot is None:
            raise ValueError("this design was built without the decode probe")
        ttft, tpot = self.ttft.copy(), self.tpot.copy()
        ttft[:, 3], tpot[:, 3] = self.alt_ttft, self.alt_tpot
        return Design(rows=self.rows, ttft=ttft, tpot=tpot, refused=self.refused,
                      alt_ttft=self.ttft[:, 3].copy(), alt_tpot=self.tpot[:, 3].copy(),
                      decode_first=not self.decode_first)  # fmt: skip

    @property
    def synchronous(self) -> npt.NDArray[np.bool_]:
        """Which rows ran an engine without async scheduling (they pay :data:`SYNC_PARAMS`)."""
        return np.array([not overlapped(m) for m in self.rows], dtype=bool)

    @property
    def synchronous_groups(self) -> int:
        """How many groups (model, GPU) have rows without async scheduling.

        The synchronous terms are tried only from two (:func:`~.fit.fit_backend`): from one,
        no other group could test them.
        """
        return len({(m.model, m.gpu) for m, s in zip(self.rows, self.synchronous, strict=True)
                    if s})  # fmt: skip

    @property
    def layers(self) -> F64:
        """Each row's decoder layers (what the ``per_layer_us`` overhead multiplies).

        0 for a model the catalog does not know (rows of real measurements never are: their
        replay needs the model; hand-made designs in tests may be).
        """
        return np.array([_layers(m.model) for m in self.rows], dtype=np.float64)

    def extra_columns(self) -> tuple[F64, F64]:
        """The TTFT and TPOT columns of :data:`EXTRA_PARAMS` (rows x 4, ms per us).

        The synchronous terms are the rows' own overhead columns where their engine runs
        without async scheduling (0 elsewhere); the per-layer term is the step column
        (``base_us``'s) times the model's decoder layers.
        """
        mask = self.synchronous[:, None]
        n = len(SYNC_PARAMS)
        layers = self.layers[:, None]
        t = np.concatenate([self.ttft[:, :n] * mask, self.ttft[:, :1] * layers], axis=1)
        p = np.concatenate([self.tpot[:, :n] * mask, self.tpot[:, :1] * layers], axis=1)
        return t, p

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


def _layers(model: str) -> int:
    try:
        return model_spec(model).layers
    except ConfigError:
        return 0


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
        alt_t = reuse.alt_ttft if reuse.alt_ttft is not None else np.zeros(len(reuse.rows))
        alt_p = reuse.alt_tpot if reuse.alt_tpot is not None else np.zeros(len(reuse.rows))
        done = {id(m): ([*t, at], [*p, ap], None)
                for m, t, p, at, ap in zip(reuse.rows, reuse.ttft, reuse.tpot, alt_t, alt_p,
                                           strict=True)}  # fmt: skip
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
        for probe, unit in (*PROBES, DECODE_PROBE):
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
        # host: us -> ms; the decode probe's column (last replayed) goes after them
        t_row[-1:] = [1e-3, isl * 1e-3, t_row[-1]]
        p_row[-1:] = [0.0, 0.0, p_row[-1]]
        kept.append(m)
        ttft_rows.append(t_row)
        tpot_rows.append(p_row)
    shape = (len(kept), len(PARAMS) + 1)
    ttft = np.array(ttft_rows, dtype=np.float64).reshape(shape)
    tpot = np.array(tpot_rows, dtype=np.float64).reshape(shape)
    return Design(rows=kept, ttft=ttft[:, :-1].copy(), tpot=tpot[:, :-1].copy(), refused=refused,
                  alt_ttft=ttft[:, -1].copy(), alt_tpot=tpot[:, -1].copy())  # fmt: skip


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


def predict(
    d: Design,
    theta: F64,
    own: Sequence[str] = (),
    steps: F64 | None = None,
    extra: F64 | None = None,
) -> tuple[F64, F64]:
    """Predicted (TTFT, TPOT) in ms of every row of ``d`` with parameters ``theta``.

    ``theta`` has the host delays of each source of ``own`` after :data:`PARAMS`'s. ``steps``
    (rows x :data:`STEP_PARAMS`) gives each row step terms of its own instead of ``theta``'s
    (per GPU generation: :func:`~dynosim.validation.calibrate.fit.row_steps`). ``extra``
    (:data:`EXTRA_PARAMS`): the terms fitted beside ``theta``.
    """
    ttft, tpot = host_matrix(d, own) @ theta, d.tpot @ theta[: len(PARAMS)]
    if extra is not None and extra.any():
        et, ep = d.extra_columns()
        ttft = ttft + et @ extra
        tpot = tpot + ep @ extra
    if steps is None:
        return ttft, tpot
    k = len(STEP_PARAMS)
    delta = steps - theta[:k]
    return ttft + (d.ttft[:, :k] * delta).sum(axis=1), tpot + (d.tpot[:, :k] * delta).sum(axis=1)


def step_calibration(step: F64, decode_first: bool = False) -> StepCalibration:
    """The step calibration of the step terms (:data:`STEP_PARAMS`), rounded for the profile.

    ``decode_first``: the terms are of the other split (:attr:`Design.decode_first`).
    """
    theta = np.concatenate([step[: len(STEP_PARAMS)], np.zeros(2)])
    return theta_calibration(theta, decode_first)[0]


def theta_calibration(
    theta: F64, decode_first: bool = False
) -> tuple[StepCalibration, HostCalibration]:
    """The step and host calibrations of a parameter vector (rounded for the profile).

    ``decode_first``: ``theta`` is of the other split (:data:`DECODE_PROBE`): ``theta[3]`` is
    ``decode - prefill`` and ``theta[4]`` is ``prefill``.
    """
    # a profile's kernel factors are at least 0.01 (the loader's range): a fit that drives
    # one to 0 has moved the kernel time into the overheads, and is written at the floor
    larger = max(round(float(theta[3] + theta[4]), 4), 0.01)
    smaller = max(round(float(theta[4]), 4), 0.01)
    step = StepCalibration(
        base_us=round(float(theta[0]), 2),
        per_request_us=round(float(theta[1]), 3),
        per_token_us=round(float(theta[2]), 4),
        prefill=smaller if decode_first else larger,
        decode=larger if decode_first else smaller,
    )
    host = HostCalibration(
        request_us=round(float(theta[5]), 1), input_token_us=round(float(theta[6]), 3)
    )
    return step, host


def calibration_theta(cal: BackendCalibration, decode_first: bool = False) -> F64:
    """The parameter vector of a backend calibration (of the other split: ``decode_first``).

    Exact on a design of the split the calibration's factors use (``decode_first`` when its
    prefill factor is below its decode factor; either when they are equal).
    """
    s, h = cal.step, cal.host
    first, second = (s.prefill, s.decode) if decode_first else (s.decode, s.prefill)
    return np.array([s.base_us, s.per_request_us, s.per_token_us, second - first,
                     first, h.request_us, h.input_token_us], dtype=np.float64)  # fmt: skip
