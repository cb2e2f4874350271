"""Bounds every workload must respect, so that bad input is refused before anything runs.

The simulator holds every request in memory (about 1 KB each, with its block hashes) and keeps
time as integer microseconds in 64-bit arrays; these limits keep both far from trouble and are
stated in the error messages that enforce them.
"""

from __future__ import annotations

import math

from dynosim.checks import bound_text, number
from dynosim.config.cluster import INTERVAL_WHY, MIN_INTERVAL_S, MIN_LINK_GBPS
from dynosim.errors import ConfigError

__all__ = [
    "CLIENTS_WHY",
    "INTERVAL_WHY",
    "MAX_BLOCK_IDS",
    "MAX_CLIENTS",
    "MAX_FIT_WEIGHT",
    "MAX_MEASUREMENT_BYTES",
    "MAX_MEASUREMENT_ROWS",
    "MAX_REPLAY_TOKENS",
    "MAX_REQUESTS",
    "MAX_ROUNDS",
    "MAX_SAMPLES",
    "MAX_TIME_S",
    "MAX_TOKENS",
    "MAX_TP",
    "MAX_TRACE_BYTES",
    "MEMORY_WHY",
    "MIN_INTERVAL_S",
    "MIN_LINK_GBPS",
    "REQUESTS_WHY",
    "TIME_WHY",
    "check_time",
    "finite_in",
    "finite_number",
]

MAX_REQUESTS = 20_000_000
"""Most requests one workload may hold (about 20 GB of memory at ~1 KB a request)."""
REQUESTS_WHY = f"at most {MAX_REQUESTS:,} requests (about 1 KB of memory each)"
MEMORY_WHY = "about 1 KB of memory a request"

MAX_TOKENS = 100_000_000
"""Largest token count of one request (far beyond any context window)."""

MAX_BLOCK_IDS = 200_000_000
"""Most prompt block hash ids one workload may hold in all (a few GB of memory)."""

MAX_TIME_S = 1e9
"""Arrival times, think times and delays must be below this (about 31.7 years)."""
TIME_WHY = f"a finite number of seconds in [0, {MAX_TIME_S:g}) (about 31.7 years)"

MAX_TRACE_BYTES = 4 << 30
"""Largest trace file read (it is streamed, but its requests are held in memory)."""

MAX_SAMPLES = 2_000_000
"""Most periodic observations (timeline samples, planner metric pulls) a run may project:
its arrivals' span over the period. Each sample holds every pool's state (~100 bytes a
worker)."""

MAX_CLIENTS = 65_536
"""Most concurrent clients of one measured benchmark point (the shipped AIConfigurator
``silicon_sample.csv`` peaks at 12,288: 256 a DP rank x 48 ranks)."""
CLIENTS_WHY = f"at most {MAX_CLIENTS:,} clients a measured point"

MAX_TP = 1024
"""Largest tensor-parallel size of a measured point (far beyond any NVLink domain)."""

MAX_ROUNDS = 1000
"""Most requests a client sends in a replay of a measured point (``--rounds``)."""

MAX_REPLAY_TOKENS = 2_000_000_000
"""Most tokens (clients x rounds x (input + output)) one measured point may replay: the
simulation steps every request's every token, so this bounds one row's work to minutes (the
largest row of the shipped ``silicon_sample.csv`` replays ~3 x 10^8 at the default 4 rounds)."""

MAX_MEASUREMENT_BYTES = 256 << 20
"""Largest measurement file read (a CSV row is ~100-300 bytes: ~10^6 rows)."""

MAX_MEASUREMENT_ROWS = 1_000_000
"""Most rows of one measurement file."""


def finite_number(value: object) -> bool:
    """True for an int or float (not a bool) that is finite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def finite_in(
    name: str,
    value: object,
    low: float,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """:func:`dynosim.checks.number`, also refusing an int too large for a float.

    ``checks.number`` would take ``10**400`` for a number above any lower bound and then fail to
    convert it; here it is refused with the field's message, as :func:`finite_number` refuses it.
    """
    if not finite_number(value):
        allowed = bound_text("a finite number", low, high, open_low=open_low, open_high=open_high)
        raise ConfigError(name, value, allowed)
    return number(name, value, low, high, open_low=open_low, open_high=open_high)


def check_time(seconds: float) -> bool:
    """True when ``seconds`` is a time the simulator can hold: finite, in [0, MAX_TIME_S)."""
    return 0.0 <= seconds < MAX_TIME_S


MAX_FIT_WEIGHT = 1e6
"""Largest weight of a calibration fit term (``--factor-prior``, ``--ttft-weight``): the
residuals are figures of order 1-10^4 ms; a weight beyond 10^6 makes the least squares
ill-conditioned (1e308 overflows them to infinity) without changing the fit further."""
