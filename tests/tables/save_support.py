"""Shared by the save/load tests: a small wide table config, a pool of ids (0 and 2**64-1
included), pushes of random gradients, and hooks that run pushes inside a save.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables.snapshot import RowSnapshot
from tables.sparse_table import SparseTable
from tables.table_config import AlwaysAdmission, EvictionConfig, InitializerConfig, OptimizerConfig, TableConfig

POOL = np.concatenate([np.array([0, 2**63, 2**64 - 1], np.uint64), np.arange(1, 300, dtype=np.uint64) * 7919])
TTL0 = EvictionConfig(ttl_passes=0)  # shrink(policy=TTL0) drops every row not pushed in this pass


def config(kind: str = "adagrad", admission: object = None, **kw: object) -> TableConfig:
    return TableConfig(name="t", dim=3, wide=True, seed=4, initializer=InitializerConfig(kind="uniform", scale=0.1),
                       wide_initializer=InitializerConfig(kind="uniform", scale=0.01),
                       optimizer=OptimizerConfig(kind=kind, lr=0.05, l2=0.01),
                       wide_optimizer=OptimizerConfig(kind="ftrl", lr=0.1, l1=0.001),
                       admission=admission or AlwaysAdmission(), **kw)


def view(t: SparseTable, keys: np.ndarray = POOL) -> tuple[np.ndarray, np.ndarray, int]:
    return t.pull(keys), t.contains(keys), t.size()


def assert_same(a: tuple, b: tuple) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert a[2] == b[2]


def push(t: SparseTable, keys: np.ndarray, rng: np.random.Generator) -> None:
    grads = (rng.normal(size=(keys.shape[0], t.width)) * 0.2).astype(np.float32)
    t.push(keys, grads, shows=rng.integers(1, 3, keys.shape[0]), clicks=rng.integers(0, 2, keys.shape[0]))


def saved(tmp_path: Path) -> tuple[SparseTable, Path, Path]:
    """A table with a base and a delta saved, so tests can load out of order."""
    rng = np.random.default_rng(2)
    a = SparseTable(config())
    push(a, POOL[:50], rng)
    a.save(tmp_path / "base")
    push(a, POOL[25:75], rng)
    a.save(tmp_path / "d1", mode="delta")
    push(a, POOL[60:80], rng)
    a.save(tmp_path / "d2", mode="delta")
    return a, tmp_path / "base", tmp_path


def save_point_recorder(monkeypatch: pytest.MonkeyPatch, t: SparseTable, seen: dict) -> None:
    """Record the table's state at the instant the base snapshot is taken (under the lock)."""
    orig = RowSnapshot.__init__

    def init(self: RowSnapshot, store: object, chunk_rows: int, **kw: object) -> None:
        orig(self, store, chunk_rows, **kw)
        if kw.get("only") is None:  # a base's point (a delta's snapshot holds only its changed rows)
            seen["view"] = view(t)
            seen["snapshot"] = self

    monkeypatch.setattr(RowSnapshot, "__init__", init)


def concurrent_batch(i: int, rng: np.random.Generator) -> np.ndarray:
    # Old ids (some in chunks already written, some not yet) and ids new since the save point.
    return np.concatenate([rng.choice(POOL[:250], size=30), POOL[250 + i % 50 : 251 + i % 50]])


def push_before_every_chunk(monkeypatch: pytest.MonkeyPatch, a: SparseTable, rng: np.random.Generator) -> list[int]:
    """Every chunk a save writes is preceded by a push of a fresh batch; returns the pushes made."""
    orig_next = RowSnapshot.next_chunk
    pushes: list[int] = []

    def next_chunk(self: RowSnapshot, store: object) -> dict:
        push(a, concurrent_batch(len(pushes), rng), rng)
        pushes.append(1)
        return orig_next(self, store)

    monkeypatch.setattr(RowSnapshot, "next_chunk", next_chunk)
    return pushes
