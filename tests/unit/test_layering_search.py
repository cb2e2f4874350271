"""``search``'s stages import downwards only, and no import cycle runs through ``search``.

Ranks, from the bottom: ``study`` (0, what to tune), ``trial`` (1, the record type), ``store``
(2, the Optuna record), ``optimizers`` (3), ``results`` (4, reading a study), then ``run`` and
``export`` (5, siblings with no edge between them), and ``cli`` (6, the one stage that may import
every other). Every import counts, module-level or lazy; imports under ``if TYPE_CHECKING:`` do
not. A module imports its own stage or a lower one; ``dynosim`` and third-party packages are
free. ``search/__init__.py`` is exempt. At most six modules stay flat in ``search/``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.unit.import_graph import cycles, import_graph, imported_names, package_modules

ROOT = Path(__file__).resolve().parents[2]
STAGES = (
    (0, ("search.study",)),
    (1, ("search.trial",)),
    (2, ("search.store",)),
    (3, ("search.optimizers",)),
    (4, ("search.results",)),
    (5, ("search.run",)),
    (5, ("search.export",)),
    (6, ("search.cli",)),
)


def stage(module: str) -> tuple[int, str] | None:
    """``(rank, stage name)`` of a ``search`` module, ``None`` when it is in no stage."""
    for rank, prefixes in STAGES:
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                return rank, prefixes[0]
    return None


def _modules() -> dict[str, Path]:
    return package_modules(ROOT, "search")


def violations(me: str, imports: Iterable[str]) -> list[str]:
    """What is wrong with module ``me`` importing ``imports`` (dotted names)."""
    mine = stage(me)
    if mine is None:
        return [f"{me} is in no stage: add it to STAGES"]
    out = []
    for imported in sorted(set(imports)):
        if not imported.startswith("search."):
            continue
        theirs = stage(imported)
        if theirs is None:
            out.append(f"{me} imports {imported}, which is in no stage")
        elif theirs[0] > mine[0] or (theirs[0] == mine[0] and theirs[1] != mine[1]):
            out.append(f"{me} ({mine[1]}, rank {mine[0]}) imports {imported} "
                       f"({theirs[1]}, rank {theirs[0]})")  # fmt: skip
    return out


MODULES = _modules()
EXEMPT = {"search"}
MAX_FLAT = 6


@pytest.mark.parametrize("name", sorted(set(MODULES) - EXEMPT))
def test_imports_go_down(name: str) -> None:
    path = MODULES[name]
    names = imported_names(path.read_text(), name, is_package=path.name == "__init__.py")
    assert violations(name, names) == []


def test_no_import_cycle_in_search() -> None:
    assert cycles(import_graph(MODULES)) == []


def test_the_check_catches_an_upward_import() -> None:
    assert violations("search.store.schema", {"search.results.front"})
    assert violations("search.study.problem", {"search.trial"})
    assert violations("search.run.driver", {"search.export.engines"})  # siblings: no edge
    assert violations("search.export.engines", {"search.run.evaluate"})
    assert violations("search.results.front", {"search.flat_module"})  # in no stage
    assert violations("search.cli.main", {"search.run.driver", "search.export", "numpy"}) == []
    assert violations("search.run.driver", {"search.store.schema", "dynosim.config"}) == []


def test_few_modules_stay_flat() -> None:
    flat = [n for n, p in MODULES.items() if n.count(".") == 1 and p.name != "__init__.py"]
    assert len(flat) <= MAX_FLAT, flat


def test_the_check_catches_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import g\n\ndef f():\n    return g()\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.c import h\n\n"
        "def g():\n    from pkg.a import f\n\n    return f\n"
    )
    (pkg / "c.py").write_text("import pkg.b\n")
    graph = import_graph(package_modules(tmp_path, "pkg"))
    assert cycles(graph) == [["pkg.a", "pkg.b"]]  # b -> c is type-only: no cycle through c
    assert cycles({"x": {"y"}, "y": set()}) == []


@pytest.mark.parametrize(
    ("old", "message"),
    [
        ("search.report", "search.report has moved: use search.results"),
        ("search.commands.tune", "search.commands has moved: use search.cli.simulator"),
    ],
)
def test_an_old_import_path_names_the_new_place(old: str, message: str) -> None:
    import importlib

    with pytest.raises(ModuleNotFoundError, match=message):
        importlib.import_module(old)
