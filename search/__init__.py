"""Multi-objective autotuning of serving deployments around the dynosim simulator.

Stages, each importing only the ones below it (``tests/unit/test_layering_search.py``):
``study/`` (what to tune) -> ``trial.py`` (the record of one evaluation) -> ``store/`` (the
Optuna record) -> ``optimizers/`` -> ``results/`` (reading a study) -> ``run/`` (evaluating and
driving) and ``export/`` (a trial as launch commands) -> ``cli/``.

Heavy libraries (optuna, pymoo, ray, plotly) are imported lazily inside the modules that use
them, so ``dynosim simulate`` starts fast.
"""
