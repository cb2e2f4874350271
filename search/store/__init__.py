"""Rank 2 of ``search``: the Optuna record of a study (opening it, its layout, its writer)."""
