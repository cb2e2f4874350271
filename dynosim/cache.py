"""Where dynosim keeps files it can always rebuild, and how it writes them.

The root is ``$DYNOSIM_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/dynosim``, else
``~/.cache/dynosim``; each cache has a folder there (``aic/`` step-time tables, ``traces/``
parsed traces). Nothing in it is ever the only copy of anything: a cache that cannot be read or
written is rebuilt or skipped, never an error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["cache_root", "write_atomic"]


def cache_root() -> Path:
    """The cache root (see the module docstring); it may not exist yet.

    Raises:
        RuntimeError: No variable is set and the home directory cannot be determined.
    """
    if root := os.environ.get("DYNOSIM_CACHE_DIR"):
        return Path(root)
    if (xdg := os.environ.get("XDG_CACHE_HOME")) and Path(xdg).is_absolute():
        return Path(xdg) / "dynosim"  # a relative XDG_CACHE_HOME is invalid: ignored
    return Path.home() / ".cache" / "dynosim"


def write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file through ``write`` so that readers see the old or the new file, whole."""
    import tempfile  # only when writing: keeps start-up light

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
