"""Saving and loading: base + deltas, resuming, refusals, corruption, saves during pushes."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from core.errors import ConfigError, Conflict, CorruptData, InvalidInput
from tables import table_files
from tables.snapshot import RowSnapshot
from tables.sparse_table import SparseTable
from tables.table_config import (
    AlwaysAdmission,
    CountAdmission,
    EvictionConfig,
    InitializerConfig,
    OptimizerConfig,
    ProbabilityAdmission,
    ScoreAdmission,
    TableConfig,
)

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


def test_base_and_deltas_with_tombstones_round_trip(tmp_path: Path) -> None:
    # A small initial capacity makes loads and pushes grow the row store and rebuild the index.
    rng = np.random.default_rng(0)
    a = SparseTable(config(initial_capacity=16))
    push(a, POOL[:100], rng)
    base = a.save(tmp_path / "base")
    assert (base["mode"], base["rows"], base["tombstones"]) == ("base", 100, 0)
    at_base = view(a)

    a.end_pass()
    push(a, POOL[50:150], rng)
    assert a.shrink(policy=TTL0) == 50  # POOL[:50] go
    d1 = a.save(tmp_path / "d1", mode="delta")
    assert (d1["rows"], d1["tombstones"]) == (100, 50)
    at_d1 = view(a)

    a.end_pass()
    push(a, POOL[:10], rng)  # re-created after being evicted
    push(a, POOL[100:160], rng)
    a.end_pass()
    push(a, POOL[140:170], rng)
    assert a.shrink(policy=TTL0) == 10 + 90  # POOL[:10] and POOL[50:140]
    push(a, POOL[50:55], rng)  # evicted and re-created in one delta: tombstone and row both go out
    d2 = a.save(tmp_path / "d2", mode="delta")
    assert d2["rows"] == 35  # POOL[140:170] and POOL[50:55]
    assert d2["tombstones"] == 100
    at_d2 = view(a)

    b = SparseTable(config(initial_capacity=16))
    push(b, POOL[200:], rng)  # a base load replaces whatever was there
    b.load(tmp_path / "base")
    assert_same(view(b), at_base)
    b.load(tmp_path / "d1")
    assert_same(view(b), at_d1)
    b.load(tmp_path / "d2")
    assert_same(view(b), at_d2)
    sa, sb = a.stats(), b.stats()
    for k in ("rows", "pass", "admitted", "evicted", "pushes", "pushed_keys", "tombstones"):
        assert sa[k] == sb[k], k

    # The restored chain continues: the next delta of b loads on top of a copy of b.
    c = SparseTable(config(initial_capacity=16))
    for d in ("base", "d1", "d2"):
        c.load(tmp_path / d)
    push(b, POOL[:20], rng)
    b.save(tmp_path / "d3", mode="delta")
    c.load(tmp_path / "d3")
    assert_same(view(c), view(b))


ADMISSIONS = {
    "count": CountAdmission(min_count=2, sketch_width=4096),
    "probability": ProbabilityAdmission(probability=0.5),
    "score": ScoreAdmission(threshold=2.0, nonclick_coeff=0.5, click_coeff=1.0, sketch_width=4096),
}


@pytest.mark.parametrize("admission", list(ADMISSIONS))
@pytest.mark.parametrize("kind", ["sgd", "adagrad", "adam", "ftrl"])
def test_save_load_and_continue_equals_never_stopping(tmp_path: Path, kind: str, admission: str) -> None:
    cfg = config(kind, ADMISSIONS[admission], eviction=EvictionConfig(ttl_passes=1))
    rng = np.random.default_rng(1)
    batches = [rng.choice(POOL, size=120) for _ in range(10)]  # duplicates within and across batches
    a = SparseTable(cfg)
    for keys in batches[:3]:
        push(a, keys, rng)
    a.end_pass()
    a.save(tmp_path / "base")
    push(a, batches[3], rng)
    a.end_pass()
    a.shrink()
    a.save(tmp_path / "delta", mode="delta")

    b = SparseTable(cfg)
    b.load(tmp_path / "base")
    b.load(tmp_path / "delta")
    assert_same(view(b), view(a))
    for i, keys in enumerate(batches[4:]):
        seed = int(rng.integers(1 << 30))
        for t in (a, b):
            push(t, keys, np.random.default_rng(seed))
            if i % 2:
                t.end_pass()
                assert t.shrink() >= 0
        assert_same(view(b), view(a))
    sa, sb = a.stats(), b.stats()
    for k in ("rows", "pass", "admitted", "pending_estimate", "not_admitted", "evicted"):
        assert sa[k] == sb[k], k
    assert sa["not_admitted"] > 0, "the admission policy must have refused some ids"


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


def test_delta_without_base_or_out_of_order_is_a_conflict(tmp_path: Path) -> None:
    _, base, root = saved(tmp_path)
    b = SparseTable(config())
    push(b, POOL[100:120], np.random.default_rng(3))
    before = view(b)
    with pytest.raises(Conflict, match="load in order"):
        b.load(root / "d1")
    assert_same(view(b), before)
    b.load(base)
    at_base = view(b)
    with pytest.raises(Conflict, match="load in order"):
        b.load(root / "d2")  # skips d1
    assert_same(view(b), at_base)
    b.load(root / "d1")
    with pytest.raises(Conflict):
        b.load(root / "d1")  # twice
    b.load(root / "d2")


def test_delta_save_without_a_base_on_its_cursor(tmp_path: Path) -> None:
    a, _, _ = saved(tmp_path)
    with pytest.raises(Conflict, match="save a base first"):
        a.save(tmp_path / "x", mode="delta", cursor="export")
    with pytest.raises(InvalidInput, match="save mode"):
        a.save(tmp_path / "x", mode="full")


def test_cursors_are_independent(tmp_path: Path) -> None:
    """A delta on one cursor holds everything since that cursor's base, whatever other
    cursors saved in between."""
    rng = np.random.default_rng(5)
    a = SparseTable(config())
    push(a, POOL[:40], rng)
    a.save(tmp_path / "ckpt_base")
    push(a, POOL[30:60], rng)
    a.save(tmp_path / "exp_base", cursor="export")
    push(a, POOL[50:70], rng)
    a.save(tmp_path / "exp_d1", mode="delta", cursor="export")
    a.save(tmp_path / "ckpt_d1", mode="delta")
    b = SparseTable(config())
    b.load(tmp_path / "ckpt_base")
    b.load(tmp_path / "ckpt_d1")
    assert_same(view(b), view(a))
    c = SparseTable(config())
    c.load(tmp_path / "exp_base")
    c.load(tmp_path / "exp_d1")
    assert_same(view(c), view(a))


def test_restored_table_continues_every_cursor_chain(tmp_path: Path) -> None:
    """Evictions made before a checkpoint but after an export's last save must still reach
    the export's next delta when it is written by a table restored from the checkpoint."""
    rng = np.random.default_rng(6)
    a = SparseTable(config())
    push(a, POOL[:40], rng)
    a.save(tmp_path / "exp_base", cursor="export")
    a.end_pass()
    push(a, POOL[20:50], rng)
    assert a.shrink(policy=TTL0) == 20  # POOL[:20], evicted after the export base
    a.save(tmp_path / "ckpt_base")
    a.end_pass()
    push(a, POOL[30:60], rng)
    assert a.shrink(policy=TTL0) == 10  # POOL[20:30], evicted after the checkpoint base
    a.save(tmp_path / "ckpt_d1", mode="delta")

    b = SparseTable(config())  # b restores the checkpoint chain, then writes the export's delta
    b.load(tmp_path / "ckpt_base")
    b.load(tmp_path / "ckpt_d1")
    assert_same(view(b), view(a))
    assert b.stats()["tombstones"] == a.stats()["tombstones"] == 30, "kept for the export cursor"
    b.save(tmp_path / "exp_d1", mode="delta", cursor="export")
    a.save(tmp_path / "exp_d1_never_stopped", mode="delta", cursor="export")

    for d in ("exp_d1", "exp_d1_never_stopped"):
        c = SparseTable(config())
        c.load(tmp_path / "exp_base")
        c.load(tmp_path / d)
        assert_same(view(c), view(a))


@pytest.mark.parametrize(
    ("other", "field"),
    [({"dim": 4}, "dim"), ({"optimizer": OptimizerConfig(kind="adam")}, "optimizer"), ({"wide": False}, "wide"),
     ({"wide_optimizer": OptimizerConfig(kind="sgd")}, "wide_optimizer"), ({"seed": 5}, "seed"),
     ({"initializer": InitializerConfig(kind="normal")}, "initializer")],
)
def test_layout_mismatch_is_a_conflict(tmp_path: Path, other: dict, field: str) -> None:
    _, base, _ = saved(tmp_path)
    fields = {"name": "t", "dim": 3, "wide": True, "seed": 4,
              "initializer": InitializerConfig(kind="uniform", scale=0.1),
              "wide_initializer": InitializerConfig(kind="uniform", scale=0.01),
              "optimizer": OptimizerConfig(kind="adagrad", lr=0.05, l2=0.01),
              "wide_optimizer": OptimizerConfig(kind="ftrl", lr=0.1, l1=0.001), **other}
    b = SparseTable(TableConfig(**fields))
    b.push([1, 2], np.ones((2, b.width), np.float32))
    before = view(b)
    with pytest.raises(Conflict, match=field) as exc:
        b.load(base)
    assert field in exc.value.detail["fields"]
    assert_same(view(b), before)


def _flip_byte(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x40
    p.write_bytes(bytes(data))


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:-5])


def _edit_manifest(change: object) -> object:
    def edit(p: Path) -> None:
        man = json.loads(p.read_text())
        change(man)
        p.write_text(json.dumps(man))
    return edit


CORRUPTIONS = {
    "rows_flipped": ("t.rows", _flip_byte),
    "rows_truncated": ("t.rows", _truncate),
    "rows_missing": ("t.rows", Path.unlink),
    "state_flipped": ("t.state", _flip_byte),
    "state_truncated": ("t.state", _truncate),
    "tombstones_missing": ("t.tombstones", Path.unlink),
    "manifest_missing": ("t.manifest.json", Path.unlink),
    "manifest_garbage": ("t.manifest.json", lambda p: p.write_bytes(b"\x00\xffnot json{")),
    "manifest_list": ("t.manifest.json", lambda p: p.write_text("[1, 2]")),
    "manifest_truncated": ("t.manifest.json", _truncate),
    "manifest_no_rows": ("t.manifest.json", _edit_manifest(lambda m: m.pop("rows"))),
    "manifest_no_pass": ("t.manifest.json", _edit_manifest(lambda m: m.pop("pass"))),
    "manifest_no_epoch": ("t.manifest.json", _edit_manifest(lambda m: m.pop("epoch"))),
    "manifest_no_save_id": ("t.manifest.json", _edit_manifest(lambda m: m.pop("save_id"))),
    "manifest_bad_counters": ("t.manifest.json", _edit_manifest(lambda m: m.update(counters={"pulls": "x"}))),
    "manifest_bad_cursors": ("t.manifest.json", _edit_manifest(lambda m: m.update(cursors={"c": 5}))),
    "manifest_bad_files": ("t.manifest.json", _edit_manifest(lambda m: m["files"].update(state=7))),
    "manifest_bad_crc": ("t.rows", _edit_manifest(lambda m: m["files"]["rows"].update(crc32c=1))),
    "manifest_more_rows": ("t.rows", _edit_manifest(lambda m: m.update(rows=m["rows"] + 1))),
    "manifest_chunk_zero": ("t.rows", _edit_manifest(lambda m: m.update(chunk_rows=0))),
    "manifest_file_outside": ("t.rows", _edit_manifest(lambda m: m["files"]["rows"].update(file="../t.rows"))),
}


@pytest.mark.parametrize("mode", ["base", "delta"])
@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_files_are_refused_and_the_table_is_unchanged(tmp_path: Path, case: str, mode: str) -> None:
    named, damage = CORRUPTIONS[case]
    _, base, root = saved(tmp_path)
    src = base if mode == "base" else root / "d1"
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    target = "t.manifest.json" if case.startswith("manifest_") else named
    damage(bad / target)
    b = SparseTable(config())
    if mode == "delta":
        b.load(base)
    b.push(POOL[200:210], np.ones((10, b.width), np.float32))
    before, stats_before = view(b), b.stats()
    with pytest.raises(CorruptData) as exc:
        b.load(bad)
    assert named in str(exc.value), f"the error must name {named}: {exc.value}"
    assert_same(view(b), before)
    after = b.stats()
    for k in ("rows", "pass", "epoch", "admitted", "pushes", "evicted", "tombstones"):
        assert after[k] == stats_before[k], k
    if mode == "delta":  # the chain still continues after the refused load
        b.load(root / "d1")


def _save_point_recorder(monkeypatch: pytest.MonkeyPatch, t: SparseTable, seen: dict) -> None:
    """Record the table's state at the instant the base snapshot is taken (under the lock)."""
    orig = RowSnapshot.__init__

    def init(self: RowSnapshot, store: object, chunk_rows: int, **kw: object) -> None:
        orig(self, store, chunk_rows, **kw)
        if kw.get("only") is None:  # a base's point (a delta's snapshot holds only its changed rows)
            seen["view"] = view(t)
            seen["snapshot"] = self

    monkeypatch.setattr(RowSnapshot, "__init__", init)


def _concurrent_batch(i: int, rng: np.random.Generator) -> np.ndarray:
    # Old ids (some in chunks already written, some not yet) and ids new since the save point.
    return np.concatenate([rng.choice(POOL[:250], size=30), POOL[250 + i % 50 : 251 + i % 50]])


def _push_before_every_chunk(monkeypatch: pytest.MonkeyPatch, a: SparseTable, rng: np.random.Generator) -> list[int]:
    """Every chunk a save writes is preceded by a push of a fresh batch; returns the pushes made."""
    orig_next = RowSnapshot.next_chunk
    pushes: list[int] = []

    def next_chunk(self: RowSnapshot, store: object) -> dict:
        push(a, _concurrent_batch(len(pushes), rng), rng)
        pushes.append(1)
        return orig_next(self, store)

    monkeypatch.setattr(RowSnapshot, "next_chunk", next_chunk)
    return pushes


def test_base_save_with_pushes_between_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic interleaving: a push runs (same thread, re-entering the lock) before
    every chunk is copied; the file still holds the table as of the save point."""
    rng = np.random.default_rng(7)
    a = SparseTable(config(initial_capacity=16))  # 250 rows fill 256: new ids during the save grow the store
    push(a, POOL[:250], rng)
    monkeypatch.setattr(table_files, "CHUNK_ROWS", 7)
    seen: dict = {}
    _save_point_recorder(monkeypatch, a, seen)
    orig_next = RowSnapshot.next_chunk  # restored for the delta below
    pushes = _push_before_every_chunk(monkeypatch, a, rng)
    man = a.save(tmp_path / "base")
    assert len(pushes) == -(-250 // 7) and man["rows"] == 250
    assert a.stats()["capacity_rows"] > 256
    assert seen["snapshot"]._n_pre > 0, "pushes hit rows not yet written: pre-images were used"
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
    _save_point_recorder(monkeypatch, a, seen)
    go, done = threading.Semaphore(0), threading.Semaphore(0)
    rounds, ncols = 40, len(a._rows.cols)

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
        push(a, _concurrent_batch(i, rng), rng)
        done.release()
    th.join(timeout=60)
    assert not th.is_alive() and not errors, errors
    assert seen["snapshot"]._n_pre > 0
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
    _save_point_recorder(monkeypatch, a, seen)
    parked, result = threading.Event(), []

    class SignallingCondition(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            parked.set()
            return super().wait(timeout)

    a._idle = SignallingCondition(a._lock)
    shrinker = threading.Thread(target=lambda: result.append(a.shrink(policy=TTL0)))
    orig_next = RowSnapshot.next_chunk

    def next_chunk(self: RowSnapshot, store: object) -> dict:
        chunk = orig_next(self, store)
        if not shrinker.is_alive() and not result:
            shrinker.start()
            a._lock.release()  # held once by the saver around next_chunk
            try:
                for _ in range(600):
                    if parked.wait(timeout=0.05) or result:
                        break
            finally:
                a._lock.acquire()
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


def test_a_restore_adopts_the_policy_in_force_at_the_save(tmp_path: Path) -> None:
    """set_policy changes a live table; saves record it; a table built from the original YAML
    that loads the save continues under the changed policy (the same job, restored)."""
    a = SparseTable(config(admission=CountAdmission(min_count=2, sketch_width=4096)))
    keys = np.arange(1, 101, dtype=np.uint64)
    a.push(keys, np.ones((100, a.width), np.float32))  # one sighting each: nothing admitted yet
    assert a.size() == 0
    new = a.set_policy(admission={"policy": "count", "min_count": 3, "sketch_width": 4096},
                       eviction=EvictionConfig(ttl_passes=1))
    assert new.admission.min_count == 3 and new.eviction.ttl_passes == 1
    assert a.stats()["pending_estimate"] == 100, "same kind and sketch shape: pending counts carry over"
    a.push(keys, np.ones((100, a.width), np.float32))
    assert a.size() == 0, "two sightings are no longer enough"
    a.save(tmp_path / "b")
    b = SparseTable(config(admission=CountAdmission(min_count=2, sketch_width=4096)))
    b.load(tmp_path / "b")
    assert b.config.admission.min_count == 3 and b.config.eviction.ttl_passes == 1
    for t in (a, b):
        t.push(keys, np.ones((100, t.width), np.float32))
    assert a.size() == b.size() == 100
    assert_same(view(b, keys), view(a, keys))


def test_set_policy_refuses_bad_settings_and_changes_nothing() -> None:
    t = SparseTable(config())
    before = t.config
    with pytest.raises(ConfigError, match="min_count"):
        t.set_policy(admission={"policy": "count", "min_count": -1})
    with pytest.raises(ConfigError, match="unknown key"):
        t.set_policy(eviction={"ttl": 3})
    assert t.config == before


@pytest.mark.parametrize("mode", ["base", "delta"])
def test_begin_save_holds_the_table_as_of_its_call(tmp_path: Path, mode: str) -> None:
    rng = np.random.default_rng(5)
    t = SparseTable(config(initial_capacity=16))
    push(t, POOL[:200], rng)
    t.save(tmp_path / "base0")
    push(t, POOL[100:250], rng)
    expected = view(t)
    point = t.begin_save(tmp_path / "snap", mode=mode)  # type: ignore[arg-type]
    push(t, POOL, rng)  # after the consistent point: in the table, not in the save
    assert not (tmp_path / "snap").exists()  # nothing is written before write()
    man = point.write()
    assert man["mode"] == mode
    r = SparseTable(config())
    if mode == "delta":
        r.load(tmp_path / "base0")
    r.load(tmp_path / "snap")
    assert_same(view(r), expected)
    gone = t.begin_save(tmp_path / "dropped", mode="base")
    gone.abort()  # given up: pushes stop keeping pre-images, the next save runs
    assert t._snapshot is None and not (tmp_path / "dropped").exists()
    t.save(tmp_path / "after", mode="delta")


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
    pushes = _push_before_every_chunk(monkeypatch, a, rng)
    man = point.write()
    assert man["rows"] == len(POOL[:250:3]) and len(pushes) == -(-250 // 7)
    assert point.snap is None and a._snapshot is None
    b = SparseTable(config())
    b.load(tmp_path / "base")
    b.load(tmp_path / "delta")
    assert_same(view(b), at_point)
