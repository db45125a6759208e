"""The folder tree reads like the architecture: imports run downstream only (the import-linter
contracts in pyproject.toml), no module takes part in an import cycle, and no private name
crosses a module boundary."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "tables", "ps", "stores", "logrecords", "streaming", "models", "exports", "jobcontrol", "trainer",
            "service", "launcher", "cli")


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))


def test_import_contracts_are_kept() -> None:
    assert lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True) == 0


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle() -> None:
    sys.path.insert(0, str(REPO))
    # the benchmarks too: grimp reads their imports without importing them (nor their extras)
    graph = grimp.build_graph(*PACKAGES, "bench", cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    # a package's __init__ re-exporting its own modules is not a cycle of concepts
    for m, targets in edges.items():
        edges[m] = {t for t in targets if not m.startswith(t + ".")}
    assert _cycles(edges) == []


def test_no_private_name_imported_across_modules() -> None:
    crossings = []
    for path in _sources():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                crossings += [f"{path.relative_to(REPO)}: from {node.module} import {a.name}"
                              for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert crossings == []


@pytest.mark.slow
def test_nothing_outside_the_benchmarks_imports_them() -> None:
    """A package or a test that imported bench/ would need the bench extras to run."""
    importers = []
    for path in [*_sources(), *sorted((REPO / "tests").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            importers += [f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] == "bench"]
    assert importers == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
