"""numba's on-disk kernel cache under saves at the same time (core.kernel_cache): two savers of
different signatures of one kernel, interleaved as two processes were on a loaded machine, each
load their own data; and every cached kernel of the packages is made through ``kernel``."""

from __future__ import annotations

import re
import threading
import tomllib
from pathlib import Path

from numba.core.caching import IndexDataCacheFile

from core.kernel_cache import make_cache_process_safe

REPO = Path(__file__).resolve().parents[2]
# the installed packages (the import contract's list) and the benchmarks
PACKAGES = (*tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"], "bench")
WAIT_S = 0.5  # how long a saver waits for the other to interleave; under the lock it never can


def _saver(cache: Path) -> IndexDataCacheFile:
    """One process's view of a kernel's cache files (same directory, kernel and source stamp)."""
    return IndexDataCacheFile(cache_path=str(cache), filename_base="kmod.f-3.py311", source_stamp=(1.0, 10))


def test_savers_of_two_signatures_at_once_each_load_their_own_code(tmp_path: Path) -> None:
    make_cache_process_safe()
    a, b = _saver(tmp_path), _saver(tmp_path)
    a_read, b_read, b_saved = threading.Event(), threading.Event(), threading.Event()
    a_load_index, a_save_data, b_load_index = a._load_index, a._save_data, b._load_index

    def a_reads_index() -> dict:  # A reads the index, then lets B read it too before it saves
        index = a_load_index()
        a_read.set()
        b_read.wait(WAIT_S)
        return index

    def a_writes_data(name: str, data: object) -> None:  # descheduled between its index and its data
        b_saved.wait(WAIT_S)
        a_save_data(name, data)

    def b_reads_index() -> dict:
        index = b_load_index()
        b_read.set()
        return index

    a._load_index, a._save_data, b._load_index = a_reads_index, a_writes_data, b_reads_index

    def save_b() -> None:
        a_read.wait(10)
        b.save("float32 signature", "code for float32")
        b_saved.set()

    other = threading.Thread(target=save_b)
    other.start()
    a.save("int64 signature", "code for int64")
    other.join(10)
    assert not other.is_alive()

    reader = _saver(tmp_path)  # a third process loading both overloads
    assert reader.load("int64 signature") == "code for int64"
    assert reader.load("float32 signature") == "code for float32"


def test_every_cached_kernel_is_made_through_kernel() -> None:
    direct = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if path == REPO / "core" / "kernel_cache.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\bnjit\b|cache\s*=\s*True", line):
                    direct.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not direct, "use core.kernel_cache.kernel, whose cache is process-safe:\n" + "\n".join(direct)
