"""What a result row must say besides its objectives: where it was judged and what it costs.

A throughput is only an answer at a load: every row of a Pareto table and every "best" line
names the load the trial was judged at (``x`` the trace's rate and the req/s that makes, a
request rate, or a number of clients), its GPUs, TTFT and ITL p90, the cost per million output
tokens at that load, and whether every SLO the study declared holds there (issue 20). The
declared SLOs are read back from the stored study file (:mod:`search.study.slo`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from search.results.labels import constraint_label, format_value
from search.store.schema import STUDY, slo_constraints, trial_metrics
from search.study.objectives import Constraint
from search.study.slo import SLO_METRICS, derived

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

FACTS = ("load", "GPUs", "TTFT p90\n(ms)", "ITL p90\n(ms)", "cost\n($/Mtok out)", "SLOs")
"""Column headers of :func:`facts`, in order (see :func:`fact_headers`)."""


def fact_headers(study: optuna.Study, slos: Sequence[Constraint]) -> list[str]:
    """:data:`FACTS` with the load's unit and the SLOs spelt out (one per line)."""
    spelt = "\n".join(constraint_label(c) for c in slos)
    load = {"speedup": "load\n(x trace rate)", "concurrency": "load\n(clients)"}
    first = load.get(_axis(study) or "", FACTS[0])
    return [first, *FACTS[1:-1], f"{FACTS[-1]}\n{spelt}" if spelt else FACTS[-1]]


def is_sweep(study: optuna.Study) -> bool:
    """Whether the study judged every config at several load levels."""
    data = study.user_attrs.get(STUDY) or {}
    return (data.get("load") or {}).get("mode") == "sweep"


def _axis(study: optuna.Study) -> str | None:
    data = study.user_attrs.get(STUDY) or {}
    axis = (data.get("load") or {}).get("axis")
    return None if axis is None else str(axis)


def declared_slos(study: optuna.Study) -> tuple[Constraint, ...]:
    """The declared SLOs as constraints (``slo.ttft_ms: 2000`` -> TTFT p90 <= 2000).

    Without a declaration, the study's own constraints stand in for them.
    """
    data = study.user_attrs.get(STUDY) or {}
    slo = ((data.get("deployment") or {}).get("slo")) or {}
    out = tuple(derived(k, v) for k, v in slo.items() if k in SLO_METRICS and v is not None)
    return out or tuple(slo_constraints(study))


def load_text(study: optuna.Study, metrics: Mapping[str, float]) -> str:
    """The load a trial was judged at.

    ``7.04x (3.2 req/s)`` (x the trace's rate), ``2.5 req/s`` or ``c=64 (3.1 req/s)``.
    """
    axis = _axis(study)
    level = metrics.get("load_level")
    rps = metrics.get("request_throughput")
    rate = "-" if rps is None else f"{format_value('request_throughput', rps)} req/s"
    if level is None or axis is None:
        return rate
    if axis == "speedup":
        return f"{level:.3g}x ({rate})"
    if axis == "concurrency":
        return f"c={level:g} ({rate})"
    return f"{level:.3g} req/s"


def slo_cell(constraints: Sequence[Constraint], metrics: Mapping[str, float]) -> str:
    """``✓`` when every one holds, else ``✗`` and the ones that do not."""
    broken = [c for c in constraints if c.violation(metrics) > 0]
    if not constraints:
        return "-"
    if not broken:
        return "✓"
    return "✗ " + ", ".join(c.metric.replace("time_to_first_token", "TTFT")
                            .replace("inter_token_latency", "ITL")
                            .replace("request_latency", "latency") for c in broken)  # fmt: skip


def facts(study: optuna.Study, trial: FrozenTrial, slos: Sequence[Constraint]) -> list[str]:
    """The :data:`FACTS` cells of one trial."""
    m = trial_metrics(trial)
    gpus = m.get("gpus")
    return [
        load_text(study, m),
        "-" if gpus is None else f"{gpus:g}",
        format_value("time_to_first_token.p90", m.get("time_to_first_token.p90")),
        format_value("inter_token_latency.p90", m.get("inter_token_latency.p90")),
        _cost(m),
        slo_cell(slos, m),
    ]


def facts_line(study: optuna.Study, trial: FrozenTrial, slos: Sequence[Constraint]) -> str:
    """The same facts as one line: ``at 7.04x trace (3.2 req/s), 8 GPUs, TTFT p90 ...``."""
    load, gpus, ttft, itl, cost, ok = facts(study, trial, slos)
    if _axis(study) == "speedup":
        load = load.replace("x (", "x the trace's rate (", 1)
    verdict = "every declared SLO holds" if ok == "✓" else f"declared SLOs: {ok}"
    return (f"at {load}, {gpus} GPUs, TTFT p90 {ttft} ms, ITL p90 {itl} ms, "
            f"${cost} per million output tokens; {verdict}")  # fmt: skip


def _cost(m: Mapping[str, Any]) -> str:
    v = m.get("cost_per_million_output_tokens")
    return format_value("cost_per_million_output_tokens", v)
