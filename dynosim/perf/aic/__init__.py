"""Step times from NVIDIA AIConfigurator's measured kernel database (``aiconfigurator-core``).

Querying AIConfigurator costs 1-300 us per call, far too slow per simulated step, so
:func:`aic_tables` evaluates the compiled model once on log-spaced grids (4 points per octave)
and :class:`AicStepTime` interpolates them with linear arithmetic only. The data flows down
the modules:

* :mod:`~dynosim.perf.aic.key`: :class:`AicKey`, what a set of tables depends on
  (:func:`resolve_key` of a deployment), and where the files live (:func:`cache_dir`);
* :mod:`~dynosim.perf.aic.build`: AIConfigurator evaluated on the grids (:func:`build_tables`);
* :mod:`~dynosim.perf.aic.cache`: the tables of a key from memory, disk or a build
  (:func:`load_tables`), and the cheap feasibility check (:func:`check_key`);
* :mod:`~dynosim.perf.aic.step_time`: :class:`AicStepTime`, the step-time model.
"""

from dynosim.perf.aic.build import build_tables
from dynosim.perf.aic.cache import EstimatedTimingWarning, aic_tables, check_key, load_tables
from dynosim.perf.aic.key import (
    QUANT_MODES,
    TABLE_FORMAT,
    AicKey,
    aic_version,
    cache_dir,
    quant_modes,
    resolve_key,
)
from dynosim.perf.aic.step_time import AicStepTime

__all__ = [
    "QUANT_MODES",
    "TABLE_FORMAT",
    "AicKey",
    "AicStepTime",
    "EstimatedTimingWarning",
    "aic_tables",
    "aic_version",
    "build_tables",
    "cache_dir",
    "check_key",
    "load_tables",
    "quant_modes",
    "resolve_key",
]
