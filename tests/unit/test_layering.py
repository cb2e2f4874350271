"""The layers import downwards only (every import, module-level, lazy or type-only).

``dynosim`` never imports ``search``; inside ``dynosim`` the order is, from the bottom:
basics (config, errors, types, files, cache, timer, workload) -> perf (step times, memory,
catalog) -> engine (worker, KV cache) -> router -> cluster (pools, links, planner) -> simulation
(and the metrics, SLO monitor and host processes it uses) -> validation (replays of
measurements). The
package's ``__init__`` re-exports the top and is exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.import_graph import cycles, import_graph, package_modules

ROOT = Path(__file__).resolve().parents[2]
LAYERS = (
    ("dynosim.errors", "dynosim.checks", "dynosim.moved", "dynosim.types", "dynosim.files",
     "dynosim.cache",
     "dynosim.timer", "dynosim.config",
     "dynosim.workload"),
    ("dynosim.perf",),
    ("dynosim.engine",),
    ("dynosim.router",),
    ("dynosim.cluster",),
    ("dynosim.metrics", "dynosim.slo_monitor", "dynosim.host", "dynosim.recording",
     "dynosim.simulation"),
    ("dynosim.validation",),
)  # fmt: skip


def _layer(module: str) -> int | None:
    for i, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def _modules() -> list[Path]:
    return sorted(p for p in (ROOT / "dynosim").rglob("*.py") if p.name != "__init__.py"
                  or p.parent != ROOT / "dynosim")  # fmt: skip


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def violations(me: str, imports: set[str]) -> list[str]:
    """What is wrong with module ``me`` importing ``imports``."""
    mine = _layer(me)
    if mine is None:
        return [f"{me} is in no layer: add it to LAYERS"]
    out = []
    for imported in sorted(imports):
        if imported.startswith("search"):
            out.append(f"{me} imports {imported}")
        elif imported.startswith("dynosim.") or imported == "dynosim":
            if imported == "dynosim":
                continue  # the package itself (never imported this way here)
            theirs = _layer(imported)
            if theirs is None:
                out.append(f"{me} imports {imported}, which is in no layer")
            elif theirs > mine:
                out.append(f"{me} (layer {mine}) imports {imported} (layer {theirs})")
    return out


@pytest.mark.parametrize("path", _modules(), ids=_name)
def test_imports_go_down(path: Path) -> None:
    assert violations(_name(path), _imports(path)) == []


def test_the_check_catches_an_upward_import() -> None:
    assert violations("dynosim.perf.silicon", {"dynosim.simulation", "numpy"})
    assert violations("dynosim.engine.worker", {"dynosim.cluster.pool"})
    assert violations("dynosim.simulation", {"search.load"})
    assert violations("dynosim.simulation", {"dynosim.cluster.pool", "dynosim.perf.aic"}) == []


def test_no_import_cycle_in_dynosim() -> None:
    assert cycles(import_graph(package_modules(ROOT, "dynosim"))) == []


def test_the_cycle_check_catches_a_lazy_two_module_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import pkg.b\n")
    (pkg / "b.py").write_text("def g():\n    from pkg import a\n\n    return a\n")
    assert cycles(import_graph(package_modules(tmp_path, "pkg"))) == [["pkg.a", "pkg.b"]]


def test_a_moved_module_names_its_new_place() -> None:
    import importlib

    with pytest.raises(ModuleNotFoundError, match=r"synthetic has moved: use dynosim\.workload"):
        importlib.import_module("dynosim.workload.synthetic")
