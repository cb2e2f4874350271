"""Rank 1 of ``search``: the record of one evaluation, and the hashes that identify it.

:class:`TrialResult` is what an evaluation returns, what the store records and what an optimizer
is told; :func:`config_hash` names a (config, workload, seed, level) so that equal ones are
evaluated once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from search.study.space import Params, Value

if TYPE_CHECKING:
    from dynosim.types import Request

__all__ = ["Params", "TrialResult", "Value", "config_hash", "params_key", "workload_id"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialResult:
    """One evaluation, as stored and as told to an optimizer.

    Attributes:
        params: The knob values (active knobs only).
        config: ``DeploymentConfig.to_dict()``, or the unvalidated merge if it did not build.
        config_hash: sha256 of config + workload id + seed; equal hashes are evaluated once.
        metrics: ``Metrics.flat()``, or ``{}`` when the config could not run.
        values: Objective values in study directions (penalties when not runnable).
        constraints: Constraint values, ``<= 0`` satisfied (see ``search.study.objectives``).
        feasible: The config ran and met every constraint.
        reason: Why it is infeasible, or ``None``.
        seed: The simulation seed.
        wall_s: Wall time of the evaluation.
    """

    params: Params
    config: dict[str, Any]
    config_hash: str
    metrics: dict[str, float]
    values: tuple[float, ...]
    constraints: tuple[float, ...]
    feasible: bool
    reason: str | None
    seed: int
    wall_s: float

    @property
    def runnable(self) -> bool:
        """True when the config built and the simulation produced metrics."""
        return bool(self.metrics)


def config_hash(
    config: Mapping[str, Any], workload_id: str, seed: int, level: object = None
) -> str:
    """sha256 of the canonical JSON of the config, the workload id, the seed, the load level.

    The level is that of a sweep point (``None``, the default, leaves it out).
    """
    key: dict[str, Any] = {"config": config, "workload": workload_id, "seed": seed}
    if level is not None:
        key["level"] = level
    blob = json.dumps(
        key,
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def params_key(params: Params) -> str:
    """A canonical string for a knob assignment (dict keys sorted)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def workload_id(requests: Sequence[Request], name: str = "") -> str:
    """A digest of the requests (part of every config hash)."""
    h = hashlib.sha256(name.encode())
    for r in requests:
        row = (r.arrival_s, r.input_tokens, r.output_tokens, r.block_hashes, r.session_id,
               r.after_id, r.delay_s)  # fmt: skip
        h.update(repr(row).encode())
    return h.hexdigest()[:16]
