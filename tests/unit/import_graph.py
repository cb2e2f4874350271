"""The import graph of a package, read from its source: every import, lazy ones included.

A plain AST walk (nothing is imported): module-level and function-level imports count, imports
under ``if TYPE_CHECKING:`` do not (they never run). Used by the layering tests of ``dynosim``
and ``search``, which also fail on an import cycle (:func:`cycles`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """``search/store/schema.py`` -> ``search.store.schema``; a package's ``__init__`` -> it."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(source: str, me: str = "", *, is_package: bool = False) -> set[str]:
    """Dotted names ``source`` imports at run time (``from a import b`` gives ``a`` and ``a.b``).

    Relative imports are resolved against module ``me``.
    """
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = me.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join([*parts[:keep], *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return out


def package_modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` (under ``root``) by dotted name."""
    return {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}


def import_graph(modules: Mapping[str, Path], names: Mapping[str, Iterable[str]] | None = None
                 ) -> dict[str, set[str]]:  # fmt: skip
    """Edges between ``modules``: who imports whom (names that are no module are dropped).

    Args:
        modules: Dotted name -> source file.
        names: Dotted names each module imports (default: read from its file).
    """
    graph: dict[str, set[str]] = {}
    for me, path in modules.items():
        raw = names[me] if names is not None else imported_names(
            path.read_text(), me, is_package=path.name == "__init__.py"
        )  # fmt: skip
        graph[me] = {n for n in raw if n in modules and n != me}
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)
