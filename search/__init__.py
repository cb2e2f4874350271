"""Multi-objective autotuning of serving deployments around the dynosim simulator.

Heavy libraries (optuna, pymoo, ray, plotly) are imported lazily inside the modules that use
them, so ``dynosim simulate`` starts fast.
"""
