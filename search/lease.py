# TEMPORARY SHIM (issue 22): removed at merge
"""Old import path of lease (issue 22 moved it)."""

from search.store.lease import refuse_if_held

__all__ = ["refuse_if_held"]
