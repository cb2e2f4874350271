"""Declared SLOs become the study's constraints.

A study declares latency SLOs in ``deployment.slo`` or in a study-level ``slo:`` (the same
mapping, in one of the two places): ``{ttft_ms, itl_ms, e2e_ms}``. The simulator counts a request
towards goodput when it meets them; a study must also *select* configurations that meet them, or
its headline winner breaks its own SLO (issue 20: the quickstart's best had ITL p90 116.6 ms
against a declared 50). So every declared SLO is a constraint on the metric's ``p90``, the
statistic the shipped studies constrain (``slo.ttft_ms: 2000`` ->
``time_to_first_token.p90 <= 2000``), in capacity, sweep and fixed studies alike, unless the
``constraints:`` list says otherwise explicitly:

* a constraint on the same metric (any statistic or bound, e.g. ``time_to_first_token.p99 <=
  1500``) replaces the declared one;
* ``{not_enforced: itl_ms}`` drops it.

Either way the report names the declared SLO that is not enforced as declared
(:func:`slo_notes`). SLOConfig's defaults (TTFT 2 s, ITL 50 ms, used for goodput when nothing is
written) are not declarations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from dynosim.checks import number
from dynosim.errors import ConfigError
from search.study.objectives import Constraint
from search.study.space import Space

SLO_METRICS: Mapping[str, str] = {
    "ttft_ms": "time_to_first_token",
    "itl_ms": "inter_token_latency",
    "e2e_ms": "request_latency",
}
"""Declared SLO field -> the latency metric it bounds (ms)."""
SLO_STAT = "p90"
"""The statistic a declared SLO constrains."""
WAIVER = "not_enforced"
"""The ``constraints:`` entry ``{not_enforced: FIELD}`` that drops a declared SLO."""


def declared_slo(at: str, data: Mapping[str, Any], deployment: dict[str, Any]) -> dict[str, float]:
    """The declared SLOs ``{field: ms}``; a study-level ``slo:`` moves into ``deployment``.

    Raises:
        ConfigError: ``slo`` given in both places, not a mapping, or with an unknown field.
    """
    top = data.get("slo")
    if top is not None:
        if "slo" in deployment:
            raise ConfigError(f"{at}slo", top, "one place: slo or deployment.slo, not both")
        deployment["slo"] = top
    raw = deployment.get("slo")
    if raw is None:
        return {}
    where = f"{at}slo" if top is not None else f"{at}deployment.slo"
    if not isinstance(raw, Mapping):
        raise ConfigError(where, raw, "a mapping {ttft_ms, itl_ms, e2e_ms}")
    for key in raw:
        if key not in SLO_METRICS:
            raise ConfigError(f"{where}.{key}", key, ", ".join(SLO_METRICS))
    # the same bound as SLOConfig's, checked here because the constraints are derived first
    return {
        k: number(f"{where}.{k}", v, 0, 10**12, open_low=True)
        for k, v in raw.items()
        if v is not None
    }


def split_constraints(at: str, raw: Sequence[Any]) -> tuple[list[Any], list[str]]:
    """``constraints:`` entries: the constraints themselves and the waived SLO fields.

    Raises:
        ConfigError: A ``not_enforced`` entry that names no SLO field.
    """
    kept: list[Any] = []
    waived: list[str] = []
    for i, c in enumerate(raw):
        if isinstance(c, Mapping) and WAIVER in c:
            field = c[WAIVER]
            if set(c) != {WAIVER} or field not in SLO_METRICS:
                allowed = "{not_enforced: " + " | ".join(SLO_METRICS) + "}"
                raise ConfigError(f"{at}constraints[{i}]", dict(c), allowed)
            waived.append(str(field))
        else:
            kept.append(c)
    return kept, waived


def derived(field: str, ms: float) -> Constraint:
    """The constraint a declared SLO becomes."""
    return Constraint(f"{SLO_METRICS[field]}.{SLO_STAT}", "<=", float(ms))


def with_declared(
    constraints: Sequence[Constraint], slo: Mapping[str, float], waived: Sequence[str]
) -> tuple[Constraint, ...]:
    """``constraints`` plus each declared SLO no explicit constraint or waiver overrides."""
    out = list(constraints)
    for field, ms in slo.items():
        if field in waived or _explicit(constraints, field):
            continue
        out.append(derived(field, ms))
    return tuple(out)


def _explicit(constraints: Sequence[Constraint], field: str) -> list[Constraint]:
    stem = SLO_METRICS[field]
    return [c for c in constraints if c.metric.partition(".")[0] == stem]


def slo_notes(
    constraints: Sequence[Constraint], slo: Mapping[str, float], waived: Sequence[str]
) -> list[str]:
    """One line per declared SLO that is not enforced as declared (waived or replaced)."""
    notes = []
    for field, ms in slo.items():
        want = derived(field, ms)
        if field in waived:
            notes.append(f"declared SLO {field} {ms:g} is not enforced (constraints: "
                         f"{{{WAIVER}: {field}}})")  # fmt: skip
            continue
        mine = _explicit(constraints, field)
        if mine and want not in mine:
            given = "; ".join(str(c) for c in mine)
            notes.append(f"declared SLO {field} {ms:g} is not enforced as {want}: the "
                         f"constraints give {given}")  # fmt: skip
    return notes


def with_margin(
    at: str,
    raw: object,
    constraints: tuple[Constraint, ...],
    fixed: Mapping[str, Any],
    space: Space,
) -> tuple[Constraint, ...]:
    """``slo_margin: p90``: latency constraints tightened by the calibration's p90 error.

    The spread is the deployment's calibration profile's (or the shipped one's) for the
    fixed backend, or the largest over the backends a ``backend`` knob offers; see
    :func:`dynosim.perf.error_bands.with_margin`.
    """
    from dynosim.perf.calibration import load_profile
    from dynosim.perf.error_bands import metric_error_kind, parse_quantile
    from dynosim.perf.error_bands import with_margin as tighten

    q = parse_quantile(raw, f"{at}slo_margin")
    path = fixed.get("calibration")
    try:
        profile = load_profile(path if isinstance(path, str) else None)
    except ConfigError as exc:
        raise ConfigError(f"{at}deployment.{exc.field}", exc.value, exc.allowed) from None
    knob = next((k for k in space.knobs if k.name == "backend"), None)
    backends = [str(v) for v in knob.values] if knob is not None else [
        str(fixed.get("backend", "vllm"))
    ]  # fmt: skip
    out = []
    for c in constraints:
        kind = metric_error_kind(c.metric)
        sigma = max(profile.sigma(b, kind) for b in backends) if kind else 0.0
        out.append(dataclasses.replace(c, value=tighten(c.metric, c.op, c.value, sigma, q)))
    return tuple(out)


def stored_notes(data: Mapping[str, Any]) -> list[str]:
    """:func:`slo_notes` of a stored study file (``StudyFile.data``); ``[]`` if unreadable."""
    slo = (data.get("deployment") or {}).get("slo") or {}
    raw = data.get("constraints") or []
    if not isinstance(slo, Mapping) or not isinstance(raw, list):
        return []
    try:
        kept, waived = split_constraints("", raw)
        explicit = [Constraint.parse(c, "constraints") for c in kept]
    except ConfigError:
        return []
    declared = {k: v for k, v in slo.items() if k in SLO_METRICS and v is not None}
    return slo_notes(explicit, declared, waived)
