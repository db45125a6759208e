"""Saves while pushes go on: each file holds the table as of its save point (copy-on-write
snapshots), no update is lost, and eviction waits for an open snapshot."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tables import table_files
from tables.snapshot import RowSnapshot
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig, InitializerConfig, OptimizerConfig, TableConfig

from .save_support import (
    POOL,
    TTL0,
    assert_same,
    concurrent_batch,
    config,
    push,
    push_before_every_chunk,
    save_point_recorder,
    view,
)


def test_base_save_with_pushes_between_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic interleaving: a push runs (same thread, re-entering the lock) before
    every chunk is copied; the file still holds the table as of the save point."""
    rng = np.random.default_rng(7)
    a = SparseTable(config(initial_capacity=16))  # 250 rows fill 256: new ids during the save grow the store
    push(a, POOL[:250], rng)
    monkeypatch.setattr(table_files, "CHUNK_ROWS", 7)
    seen: dict = {}
    save_point_recorder(monkeypatch, a, seen)
    orig_next = RowSnapshot.next_chunk  # restored for the delta below
    pushes = push_before_every_chunk(monkeypatch, a, rng)
    man = a.save(tmp_path / "base")
    assert len(pushes) == -(-250 // 7) and man["rows"] == 250
    assert a.stats()["capacity_rows"] > 256
    assert seen["snapshot"].preimages > 0, "pushes hit rows not yet written: pre-images were used"
    monkeypatch.setattr(RowSnapshot, "next_chunk", orig_next)
    a.save(tmp_path / "delta", mode="delta")
    now = view(a)
    assert not np.array_equal(now[0], seen["view"][0])

    b = SparseTable(config())
    b.load(tmp_path / "base")
    assert_same(view(b), seen["view"])
    b.load(tmp_path / "delta")  # the pushes made during the save are in the next delta
    assert_same(view(b), now)


def test_base_save_in_a_thread_while_another_thread_pushes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A saver thread and a pusher thread take turns between chunks (handshake in the
    rows writer, outside the table lock); the file holds the table as of the save point."""
    rng = np.random.default_rng(8)
    a = SparseTable(config())
    push(a, POOL[:250], rng)
    monkeypatch.setattr(table_files, "CHUNK_ROWS", 5)
    seen: dict = {}
    save_point_recorder(monkeypatch, a, seen)
    go, done = threading.Semaphore(0), threading.Semaphore(0)
    rounds, ncols = 40, len(a.state.rows.cols)

    class PausingWriter(table_files.AtomicWriter):
        writes = 0

        def write(self, data: object) -> None:
            if self.writes % ncols == 0 and self.writes // ncols < rounds:
                go.release()  # let the pusher in once per chunk ...
                assert done.acquire(timeout=30)  # ... and wait until its push is applied
            self.writes += 1
            super().write(data)

    monkeypatch.setattr(table_files, "AtomicWriter", PausingWriter)
    errors: list[BaseException] = []

    def saver() -> None:
        try:
            a.save(tmp_path / "base")
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    th = threading.Thread(target=saver)
    th.start()
    for i in range(rounds):
        assert go.acquire(timeout=30)
        push(a, concurrent_batch(i, rng), rng)
        done.release()
    th.join(timeout=60)
    assert not th.is_alive() and not errors, errors
    assert seen["snapshot"].preimages > 0
    monkeypatch.undo()

    after = view(a)
    assert not np.array_equal(after[0], seen["view"][0]), "the pushes changed the live table"
    b = SparseTable(config())
    b.load(tmp_path / "base")
    assert_same(view(b), seen["view"])


def test_free_running_threads_lose_no_update_and_every_save_is_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pushers on disjoint ids, a saver and an evaluator run without any coordination. Each
    id's final value is its own gradients replayed in order; each base equals the table at
    its save point (recorded under the lock when the snapshot starts)."""
    cfg = TableConfig(name="t", dim=2, initializer=InitializerConfig(kind="uniform", scale=0.1),
                      optimizer=OptimizerConfig(kind="sgd", lr=1.0), initial_capacity=16)
    t = SparseTable(cfg)
    monkeypatch.setattr(table_files, "CHUNK_ROWS", 16)
    points: list[tuple] = []
    orig = RowSnapshot.__init__

    def init(self: RowSnapshot, store: object, chunk_rows: int, **kw: object) -> None:
        orig(self, store, chunk_rows, **kw)
        if kw.get("only") is None:  # bases only
            points.append(view(t, ids))

    monkeypatch.setattr(RowSnapshot, "__init__", init)
    n_threads, rounds = 3, 150
    ids = np.arange(n_threads * 100, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    grads = {i: np.random.default_rng(i).normal(size=(rounds, 100, 2)).astype(np.float32) for i in range(n_threads)}
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(fn: object) -> object:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:
                errors.append(exc)
        return run

    def pusher(i: int) -> None:
        mine = ids[i * 100 : (i + 1) * 100]
        for r in range(rounds):
            sel = np.random.default_rng(r).permutation(100)[: 20 + r % 60]
            t.push(mine[sel], grads[i][r][sel])

    def saver() -> None:
        k = 0
        while not stop.is_set() or k < 2:
            t.save(tmp_path / f"s{k}")
            k += 1

    def reader() -> None:
        while not stop.is_set():
            t.pull(ids)
            t.shrink(policy=EvictionConfig(max_rows=0), dry_run=True)

    workers = [threading.Thread(target=guarded(lambda i=i: pusher(i))) for i in range(n_threads)]
    side = [threading.Thread(target=guarded(saver)), threading.Thread(target=guarded(reader))]
    for th in workers + side:
        th.start()
    for th in workers:
        th.join(timeout=120)
    stop.set()
    for th in side:
        th.join(timeout=120)
    assert not errors, errors
    assert not any(th.is_alive() for th in workers + side)

    expect = SparseTable(cfg).pull(ids)  # initial rows, then every gradient replayed in order
    for i in range(n_threads):
        for r in range(rounds):
            sel = np.random.default_rng(r).permutation(100)[: 20 + r % 60]
            expect[i * 100 + sel] -= grads[i][r][sel]
    np.testing.assert_array_equal(t.pull(ids), expect)
    assert len(points) >= 2
    for k, point in enumerate(points):
        b = SparseTable(cfg)
        b.load(tmp_path / f"s{k}")
        assert_same(view(b, ids), point)


def test_shrink_during_a_base_save_waits_for_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eviction moves rows, so it must not run between two chunks of a base save. The saver
    lets go of the lock after its first chunk until the shrinking thread has either parked
    itself (waiting for the snapshot to end) or finished."""
    rng = np.random.default_rng(9)
    a = SparseTable(config())
    push(a, POOL[:100], rng)
    a.end_pass()
    push(a, POOL[:40], rng)  # POOL[40:100] are a pass old: TTL0 evicts them
    monkeypatch.setattr(table_files, "CHUNK_ROWS", 3)
    seen: dict = {}
    save_point_recorder(monkeypatch, a, seen)
    parked, result = threading.Event(), []

    class SignallingCondition(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            parked.set()
            return super().wait(timeout)

    a.lock.idle = SignallingCondition(a.lock.mutex)
    shrinker = threading.Thread(target=lambda: result.append(a.shrink(policy=TTL0)))
    orig_next = RowSnapshot.next_chunk

    def next_chunk(self: RowSnapshot, store: object) -> dict:
        chunk = orig_next(self, store)
        if not shrinker.is_alive() and not result:
            shrinker.start()
            a.lock.mutex.release()  # held once by the saver around next_chunk
            try:
                for _ in range(600):
                    if parked.wait(timeout=0.05) or result:
                        break
            finally:
                a.lock.mutex.acquire()
        return chunk

    monkeypatch.setattr(RowSnapshot, "next_chunk", next_chunk)
    a.save(tmp_path / "base")
    shrinker.join(timeout=60)
    assert parked.is_set()
    assert result == [60]
    assert a.contains(POOL[:100]).tolist() == [True] * 40 + [False] * 60
    b = SparseTable(config())
    b.load(tmp_path / "base")
    assert_same(view(b), seen["view"])


def test_delta_save_with_pushes_between_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delta is a copy-on-write snapshot of its changed rows: pushes before every chunk (to
    changed and unchanged rows, and new ids) leave the file as of the save point."""
    rng = np.random.default_rng(11)
    a = SparseTable(config(initial_capacity=16))
    push(a, POOL[:250], rng)
    a.save(tmp_path / "base")
    push(a, POOL[:250:3], rng)  # the delta: every third row
    monkeypatch.setattr(table_files, "CHUNK_ROWS", 7)
    at_point = view(a)
    point = a.begin_save(tmp_path / "delta", mode="delta")
    pushes = push_before_every_chunk(monkeypatch, a, rng)
    man = point.write()
    assert man["rows"] == len(POOL[:250:3]) and len(pushes) == -(-250 // 7)
    assert point.snap is None and a.lock.snapshot is None
    b = SparseTable(config())
    b.load(tmp_path / "base")
    b.load(tmp_path / "delta")
    assert_same(view(b), at_point)
