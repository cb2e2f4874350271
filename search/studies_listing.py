"""A rich table of every study in a storage, for ``dynosim studies``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.report import is_feasible, pareto_of

if TYPE_CHECKING:
    from rich.table import Table


def studies_table(storage_url: str) -> Table:
    """One row per study: trials by state, feasible count, Pareto size, status, hypervolume.

    Raises:
        DynosimError: The storage cannot be opened.
    """
    import optuna
    from rich.table import Table

    from search.storage import open_storage

    storage = open_storage(storage_url)
    table = Table(title=f"studies in {storage_url}", title_justify="left")
    for col in ("name", "status", "trials", "complete/running/failed", "feasible", "Pareto", "HV"):
        table.add_column(col, justify="left" if col in ("name", "status") else "right")
    ts = optuna.trial.TrialState
    for s in sorted(storage.get_all_studies(), key=lambda s: s.study_name):
        trials = storage.get_all_trials(s._study_id, deepcopy=False)
        count = {
            st: sum(t.state == st for t in trials) for st in (ts.COMPLETE, ts.RUNNING, ts.FAIL)
        }
        directions = [d.name.lower() for d in s.directions]
        history = s.user_attrs.get("hv_history") or []
        hv = max((float(h[1]) for h in history), default=None)
        table.add_row(
            s.study_name,
            str(s.user_attrs.get("status", "-")),
            str(len(trials)),
            f"{count[ts.COMPLETE]}/{count[ts.RUNNING]}/{count[ts.FAIL]}",
            str(sum(is_feasible(t) for t in trials)),
            str(len(pareto_of(trials, directions))),
            "-" if hv is None else f"{hv:.4f}",
        )
    return table
