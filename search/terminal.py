"""The terminal the CLI prints to."""

from __future__ import annotations

import os
import sys
from typing import Any


def make_console() -> Any:
    """A rich console; piped output gets 160 columns so tables are not squeezed into 80."""
    from rich.console import Console

    wide = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160
    return Console(width=wide)
