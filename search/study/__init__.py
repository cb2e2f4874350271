"""Rank 0 of ``search``: the study as data (what to tune, against what, judged how).

No Optuna and no Ray here: the space of knobs, the objectives and SLO constraints, how knob
values become a ``DeploymentConfig``, the load mode, and the study file's typed sections.
"""
