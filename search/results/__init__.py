"""Rank 4 of ``search``: reading and summarising a study; presentation at the leaves.

Pure functions over stored trials: labels, the Pareto front (:mod:`search.results.front`, the one
dominance implementation), hypervolume and convergence, best configuration per SLO, counts, knob
importance; then rich tables, plotly pages (imported lazily) and the report writer.
"""
