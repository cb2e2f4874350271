"""Old import paths that moved: importing one fails with a message naming the new place.

A package lists its moved modules once (``install({"search.report": "search.results ..."})``);
the finder sits last on ``sys.meta_path``, so it is asked only after every real module was
looked for, and a module that exists is never shadowed.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Refuses a moved module with ``ModuleNotFoundError`` naming where its contents went."""

    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = dict(moved)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        """None for a module not listed; for a listed one, the error that names its new place."""
        new = self.moved.get(fullname)
        if new is None:
            return None
        raise ModuleNotFoundError(f"{fullname} has moved: use {new}", name=fullname)


def install(moved: Mapping[str, str]) -> None:
    """Add ``moved`` (old module -> where its contents are now) to the finder, once."""
    for finder in sys.meta_path:
        if isinstance(finder, MovedModuleFinder):
            finder.moved.update(moved)
            return
    sys.meta_path.append(MovedModuleFinder(moved))
