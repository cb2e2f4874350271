"""Fit a calibration profile to measurements by replaying them in the simulator.

The parameters of one backend are ``theta = (base_us, per_request_us, per_token_us, prefill -
decode, decode, host request_us, host input_token_us)`` (:mod:`dynosim.perf.calibration`).
Every engine step of a replay lasts ``decode * K + (prefill - decode) * K_prefill + base +
per_request * requests + per_token * tokens`` (``K``: the step's kernel time, ``K_prefill``:
its prefill chunks' share; see :class:`~dynosim.perf.overhead.CalibratedStepTime`, whose split
of a mixed step is this one when ``prefill >= decode``; when ``prefill < decode`` it is
``prefill * K + (decode - prefill) * K_decode``, the same model with the decodes' own kernel
time as column 3 (:data:`~.linear.DECODE_PROBE`): the fit is run on both splits, each with its
difference bounded below by 0, and keeps the better, :func:`~.profile.calibrate`) and the host
cost adds ``request_us + input_token_us * input
tokens`` to a request's TTFT (the backend's pair, or that of the row's measurement file when it
has enough rows of its own: :func:`fit_backend`). In a closed-loop benchmark (all clients start
together, each sends its next request when the previous completes) *which* requests share
*which* steps does not depend on how long the steps take, so each row's mean TTFT and TPOT are
linear in ``theta``: ``y = A theta``. The design matrix ``A`` comes from the simulator's own
schedule: the row is replayed once per step term with only that term switched on (a *probe*:
e.g. 1 ms per step and nothing else; 10x the prefill chunks' share; 10x the kernel time), which
sums exactly that term over the steps each measured request spent waiting and decoding. The
host columns are the mean input length and 1.

Per backend, ``scipy.optimize.least_squares`` (overheads and delays bounded below by 0, the
kernel factors kept in their physical range :data:`~.options.FACTOR_BOUNDS`, ``soft_l1`` loss
so a few rows far off do not dominate) minimises the relative errors ``A theta / measured - 1``
of TTFT and TPOT, with a weak prior pulling both kernel factors to 1 (they are only moved when
the data ask for it). The fit is checked by re-simulating every row with the fitted profile.
Leave-one-configuration-out: a configuration is one (model, GPU, backend, TP); each is
predicted (through ``A``) by the fit on the backend's other configurations, and the residual
spread ``sigma`` (standard deviation of ``log(simulated / measured)``) written to the profile is
that of these held-out predictions: the error to expect on a configuration not fitted on.
"""

from dynosim.validation.calibrate.fit import (
    GENERATION_ROWS,
    SOURCE_HOST_ROWS,
    BackendFit,
    fit_backend,
    fit_generations,
    fit_theta,
    row_steps,
)
from dynosim.validation.calibrate.linear import (
    PARAMS,
    PROBES,
    STEP_PARAMS,
    Design,
    calibration_theta,
    design,
    host_matrix,
    predict,
    step_calibration,
    theta_calibration,
)
from dynosim.validation.calibrate.options import FACTOR_BOUNDS, FACTOR_PRIOR, FitOptions
from dynosim.validation.calibrate.profile import (
    calibrate,
    choose_clients,
    group_errors,
    mixed_design,
)
from dynosim.validation.calibrate.streaming import STREAMING_GAIN, STREAMING_GRID_US, fit_host

__all__ = [
    "FACTOR_BOUNDS",
    "FACTOR_PRIOR",
    "GENERATION_ROWS",
    "PARAMS",
    "PROBES",
    "SOURCE_HOST_ROWS",
    "STEP_PARAMS",
    "STREAMING_GAIN",
    "STREAMING_GRID_US",
    "BackendFit",
    "Design",
    "FitOptions",
    "calibrate",
    "calibration_theta",
    "choose_clients",
    "design",
    "fit_backend",
    "fit_generations",
    "fit_host",
    "fit_theta",
    "group_errors",
    "host_matrix",
    "mixed_design",
    "predict",
    "row_steps",
    "step_calibration",
    "theta_calibration",
]
