"""The simulator's own subcommands: ``simulate``, ``validate``, ``calibrate``."""
