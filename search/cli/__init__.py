"""The ``dynosim`` command line, :func:`main`; its subcommands are in ``simulator/``, ``study/``."""

from search.cli.main import main

__all__ = ["main"]
