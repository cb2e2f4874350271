"""Simulators that misbehave on purpose, for the evaluator's fault tests.

Each one is ``fakes.simulate`` except for configs with ``tp == 2``, where it raises, hangs or
allocates without bound. They live in a module (not in a test) so that Ray workers and forked
children find them by name.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynosim.config import DeploymentConfig
from dynosim.types import Request
from tests.unit.search import fakes

FAULTY_TP = 2
"""The ``tp`` whose configs misbehave; every other config runs ``fakes.simulate``."""
HANG_S = 600.0
"""How long a hanging simulation sleeps: far beyond any test's time limit."""
ALLOCATE_BYTES = 4 * 2**30
"""What a runaway simulation asks for: far beyond any test's memory limit."""


def raising(config: DeploymentConfig, requests: Sequence[Request], **kw: Any) -> Any:
    """Raise ``RuntimeError`` (a simulator bug) for the faulty configs."""
    if config.tp == FAULTY_TP:
        raise RuntimeError("injected simulator bug")
    return fakes.simulate(config, requests, **kw)


def hanging(config: DeploymentConfig, requests: Sequence[Request], **kw: Any) -> Any:
    """Sleep far beyond the time limit for the faulty configs."""
    if config.tp == FAULTY_TP:
        time.sleep(HANG_S)
    return fakes.simulate(config, requests, **kw)


def allocating(config: DeploymentConfig, requests: Sequence[Request], **kw: Any) -> Any:
    """Allocate 4 GiB for the faulty configs (a runaway)."""
    if config.tp == FAULTY_TP:
        hog = bytearray(ALLOCATE_BYTES)
        hog[-1] = 1
    return fakes.simulate(config, requests, **kw)


def on_node(config: DeploymentConfig, requests: Sequence[Request], **kw: Any) -> Any:
    """``fakes.simulate`` that notes the Ray node it ran on, and is slow enough to overlap.

    Each call appends ``NODE_ID CONFIG`` to the file ``FAULTY_NODE_LOG`` names (one line, one
    ``write``, so concurrent appends do not interleave) and sleeps ``FAULTY_SLEEP_S``.
    """
    import ray

    node = ray.get_runtime_context().get_node_id()
    log = os.environ.get("FAULTY_NODE_LOG")
    if log:
        line = f"{node} tp={config.tp} seqs={config.engine.max_num_seqs}\n"
        with Path(log).open("a", encoding="utf-8") as f:
            f.write(line)
    time.sleep(float(os.environ.get("FAULTY_SLEEP_S", "0")))
    return fakes.simulate(config, requests, **kw)
