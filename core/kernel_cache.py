"""How every numba kernel of streamrec is compiled: :func:`kernel`, numba's ``njit`` with its
on-disk cache, the cache made safe for processes that compile at the same time.

Why: numba (0.68) saves a compiled overload in two steps, the cache index (signature -> data
file) and then the data file, and names a new data file by the first number its own reading of
the index left free. Two processes saving different signatures of one kernel at once (the
shards, trainers and service of one job, or a test beside a benchmark, after an edit made the
cache stale) can both take number 1; the index then names one signature's file holding the
other's machine code. A process that loads it runs code compiled for other argument types:
garbage values or a crash, in every process that loads it until the source changes (shown
by interleaving two savers in tests/core/test_kernel_cache.py; numba issue 10128 describes the
same race for gufuncs). Every save here holds an exclusive ``flock`` on the cache directory's
lock file from reading the index to writing the data, and every load a shared one, so an index
never names a file another signature's save wrote.

A process's first kernel call, cached or not, also loads numba's typing and lowering registries
(:func:`load_runtime` does it at set-up instead, without the BLAS probe's import of scipy.linalg).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.abc
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from numba import njit
from numba.core.caching import IndexDataCacheFile

# The hot kernels' options (tables, optimizers, gathers): no GIL, and numpy's error model, which
# spares every division the zero check of numba's Python error model (several times slower here).
JIT: dict[str, Any] = {"nogil": True, "error_model": "numpy"}
LOCK_NAME = ".streamrec-cache.lock"


def kernel(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)`` with the cache made process-safe first."""
    make_cache_process_safe()
    return njit(cache=True, **options)


def load_runtime() -> None:
    """Load numba's registries now, as a process's first kernel call would, without importing
    scipy.linalg: numba's array math probes for a BLAS by importing it (a large import in every
    process), no kernel here calls BLAS, and numba's own linear algebra imports it again when
    such a kernel is compiled. Call it before any thread runs a kernel; a process that imported
    scipy.linalg already keeps it."""
    from numba.core.registry import cpu_target

    refuse = _RefuseImport("scipy.linalg")
    sys.meta_path.insert(0, refuse)
    try:
        import numba.np.arraymath  # noqa: F401  (its BLAS probe runs once, here, and finds none)
    finally:
        sys.meta_path.remove(refuse)
    cpu_target.target_context.refresh()


class _RefuseImport(importlib.abc.MetaPathFinder):
    """A finder that makes ``import <package>`` (and its submodules) fail while it is installed."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname == self.package or fullname.startswith(self.package + "."):
            raise ModuleNotFoundError(f"{fullname} is not loaded at numba's start-up", name=fullname)
        return None


def make_cache_process_safe() -> None:
    """Lock numba's cache index and data files across processes (module docstring); idempotent."""
    if getattr(IndexDataCacheFile.save, "locked_across_processes", False):
        return
    save, load = IndexDataCacheFile.save, IndexDataCacheFile.load

    def locked_save(self: IndexDataCacheFile, key: Any, data: Any) -> None:
        with cache_lock(self._cache_path, fcntl.LOCK_EX):
            save(self, key, data)

    def locked_load(self: IndexDataCacheFile, key: Any) -> Any:
        with cache_lock(self._cache_path, fcntl.LOCK_SH):
            return load(self, key)

    vars(locked_save)["locked_across_processes"] = True  # the mark the check above reads
    IndexDataCacheFile.save, IndexDataCacheFile.load = locked_save, locked_load


@contextlib.contextmanager
def cache_lock(cache_path: str, mode: int) -> Iterator[None]:
    """Hold ``flock(mode)`` on ``cache_path``'s lock file (a file of its own: numba replaces the
    index and data files by rename, so a lock on them would not be held by the new file)."""
    fd = os.open(os.path.join(cache_path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
