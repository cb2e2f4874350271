"""The autotuner's subcommands: ``tune``, ``resume``, ``report``, ``studies``, ``export``."""
