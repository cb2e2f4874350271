"""Writing a study's report: CSV of every trial and of the front, and the HTML pages."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.results.importance import knob_importances
from search.results.tables import pareto_rows, trials_frame, write_csv

if TYPE_CHECKING:
    import optuna


def write_report(
    study: optuna.Study, out_dir: str | Path, *, importances: Sequence[Any] | None = None
) -> dict[str, Path]:
    """Write ``trials.csv``, ``pareto.csv`` and the plots: Pareto, convergence, importance.

    ``importances``: the study's :func:`search.results.importance.knob_importances`, when the caller
    has them already (they are computed otherwise).

    Returns:
        Paths keyed ``trials_csv``, ``pareto_csv``, ``pareto_html``, ``convergence_html``,
        ``importance_html``.
    """
    from search.results.pages.html import write_html
    from search.results.pages.study import convergence_figure, importance_figure, pareto_figures

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = trials_frame(study)
    front = pareto_rows(study, rows)
    columns = ["number", "configs", "group_trials", *list(rows[0])[1:]] if rows else None
    return {
        "trials_csv": write_csv(rows, out / "trials.csv"),
        "pareto_csv": write_csv(front, out / "pareto.csv", columns),
        "pareto_html": write_html(
            pareto_figures(study), out / "pareto.html", f"{study.study_name}: Pareto front"
        ),
        "convergence_html": write_html(
            [convergence_figure(study)],
            out / "convergence.html",
            f"{study.study_name}: convergence",
        ),
        "importance_html": write_html(
            [
                importance_figure(
                    study.study_name,
                    list(importances) if importances is not None else knob_importances(study),
                )
            ],
            out / "importance.html",
            f"{study.study_name}: knob importance",
        ),
    }
