"""A rich table of every study in a storage, for ``dynosim studies``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from search.report import pareto_of

if TYPE_CHECKING:
    from rich.table import Table


def studies_table(storage_url: str) -> Table:
    """One row per study: trials by state, feasible count, Pareto size, status, hypervolume.

    The counts are :func:`search.storage.trial_counts`, as ``tune`` and ``report`` show them.

    Raises:
        DynosimError: The storage cannot be opened.
    """
    from rich.table import Table

    from search.storage import open_storage, trial_counts

    storage = open_storage(storage_url)
    table = Table(title=f"studies in {storage_url}", title_justify="left")
    for col in ("name", "status", "trials", "complete/running/failed", "feasible", "Pareto", "HV"):
        table.add_column(col, justify="left" if col in ("name", "status") else "right")
    for s in sorted(storage.get_all_studies(), key=lambda s: s.study_name):
        trials = storage.get_all_trials(s._study_id, deepcopy=False)
        c = trial_counts(trials)
        directions = [d.name.lower() for d in s.directions]
        history = s.user_attrs.get("hv_history") or []
        hv = max((float(h[1]) for h in history), default=None)
        table.add_row(
            s.study_name,
            study_status(s.user_attrs.get("status"), s.system_attrs),
            str(c.total),
            f"{c.complete}/{c.running}/{c.failed}",
            str(c.feasible),
            str(len(pareto_of(trials, directions))),
            "-" if hv is None else f"{hv:.4f}",
        )
    return table


def study_status(status: Any, system_attrs: dict[str, Any]) -> str:
    """The stored status; ``running`` names its driver, or says ``interrupted`` if none is."""
    from search.lease import LEASE_KEY, Holder

    if status != "running":
        return str(status or "-")
    holder = Holder.parse(system_attrs.get(LEASE_KEY))
    if holder is None or holder.stale_reason() is not None:
        return "interrupted"
    return f"running ({holder.label})"
