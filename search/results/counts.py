"""Trials of a study by state: the one count ``tune``, ``studies`` and ``report`` show."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from search.store.schema import is_feasible

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True, slots=True)
class TrialCounts:
    """Trials of a study by state: the one definition ``tune``, ``studies`` and ``report`` show.

    ``total`` is every stored trial; ``complete`` the evaluated ones (a config that cannot run
    is a COMPLETE infeasible trial), which the trial budget counts; ``failed`` evaluations lost
    to a crash (re-run on resume); ``running`` trials being evaluated, or left by a crash;
    ``feasible`` complete trials that meet every constraint (``search.store.schema.is_feasible``).
    """

    total: int
    complete: int
    running: int
    failed: int
    feasible: int

    def summary(self) -> str:
        """``"34 trials (32 complete, 1 running, 1 failed), 30 feasible"``."""
        return (
            f"{self.total} trials ({self.complete} complete, {self.running} running, "
            f"{self.failed} failed), {self.feasible} feasible"
        )


def trial_counts(trials: Sequence[optuna.trial.FrozenTrial]) -> TrialCounts:
    """Count ``trials`` by state (see :class:`TrialCounts`)."""
    import optuna

    ts = optuna.trial.TrialState
    return TrialCounts(
        total=len(trials),
        complete=sum(t.state == ts.COMPLETE for t in trials),
        running=sum(t.state == ts.RUNNING for t in trials),
        failed=sum(t.state == ts.FAIL for t in trials),
        feasible=sum(is_feasible(t) for t in trials),
    )
