from __future__ import annotations

import pytest

from search.results.hypervolume import HypervolumeTracker, converged


def test_front_and_hypervolume_with_fixed_reference() -> None:
    t = HypervolumeTracker(["maximize", "minimize"])
    t.add([[1.0, 10.0], [2.0, 20.0], [0.5, 30.0]])  # the last one is dominated
    assert len(t.front) == 2
    hv1 = t.hypervolume()
    ref = t.reference
    assert ref is not None
    assert ref["bounds"] == [[1.0, 2.0], [10.0, 20.0]]
    assert hv1 == pytest.approx(1.1 * 0.1 + 0.1 * 1.0)
    t.add([[3.0, 5.0]])  # dominates everything
    assert len(t.front) == 1
    assert t.hypervolume() > hv1
    assert t.reference is ref  # fixed once chosen


def test_given_bounds_and_stored_reference() -> None:
    t = HypervolumeTracker(["maximize"], bounds=[(0.0, 10.0)])
    t.add([[5.0]])
    assert t.hypervolume() == pytest.approx(1.1 - 0.5)
    again = HypervolumeTracker(["maximize"], reference=t.reference)
    again.add([[5.0]])
    assert again.hypervolume() == pytest.approx(t.hypervolume())


def test_empty_front() -> None:
    assert HypervolumeTracker(["minimize", "minimize"]).hypervolume() == 0.0


def test_converged_rule() -> None:
    assert not converged([[8, 0.5]], tol=0.01, patience=2)
    assert not converged([[8, 0.5], [16, 0.6], [24, 0.7]], tol=0.01, patience=2)
    assert converged([[8, 0.5], [16, 0.7], [24, 0.7], [32, 0.701]], tol=0.01, patience=2)
    assert not converged([[8, 0.0], [16, 0.0], [24, 0.0]], tol=0.01, patience=2)
