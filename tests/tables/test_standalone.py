"""tables/ is the engine alone: it imports nothing of streamrec but core/, needs no pyzmq, and
works in a process where every other package of streamrec is missing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# llvmlite is numba's code generator (tables/cache_hint.py emits the prefetch intrinsic with it).
ALLOWED = {"tables", "core", "numpy", "numba", "llvmlite", "pydantic", "crc32c"}
# Packages the engine must run without: pyzmq and every streamrec package above tables/.
BLOCKED = ("zmq", "ps", "stores", "logrecords", "streaming", "models", "exports", "trainer", "service", "launcher",
           "cli")


def _imported_packages(path: Path) -> set[str]:
    """Top-level names of the absolute imports in one module (relative ones stay inside)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_tables_imports_only_core_its_libraries_and_the_standard_library() -> None:
    outside = {}
    for path in sorted((REPO / "tables").rglob("*.py")):
        extra = _imported_packages(path) - ALLOWED - set(sys.stdlib_module_names)
        if extra:
            outside[str(path.relative_to(REPO))] = sorted(extra)
    assert outside == {}


_SCRIPT = """
import importlib, pkgutil, sys, tempfile
import numpy as np

BLOCKED = set(sys.argv[1:])


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
        return None


sys.meta_path.insert(0, Blocker())
try:
    import zmq  # noqa: F401
except ImportError:
    pass
else:
    raise AssertionError("the blocker let zmq through")
import tables

for info in pkgutil.iter_modules(tables.__path__):
    importlib.import_module(f"tables.{info.name}")
from tables.sparse_table import SparseTable
from tables.table_config import TableConfig

cfg = TableConfig(name="t", dim=4)
table = SparseTable(cfg)
keys = np.array([1, 7, 2**64 - 1], np.uint64)
table.push(keys, np.ones((3, 4), np.float32))
rows = table.pull(keys)
with tempfile.TemporaryDirectory() as tmp:
    table.save(tmp)
    restored = SparseTable(cfg)
    restored.load(tmp)
np.testing.assert_array_equal(restored.pull(keys), rows)
assert restored.size() == 3
loaded = sorted({m.split(".")[0] for m in sys.modules} & BLOCKED)
assert not loaded, loaded
print("engine ok")
"""


@pytest.mark.process
def test_tables_works_without_pyzmq_or_any_package_above_it() -> None:
    run = subprocess.run([sys.executable, "-c", _SCRIPT, *BLOCKED], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "engine ok"
