"""Rank 5 of ``search``: evaluating configurations and driving a study (ask, evaluate, tell)."""
