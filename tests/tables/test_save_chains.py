"""Base and delta saves and their restores: chains, cursors, resuming where a save left off."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from tables.sparse_table import SparseTable
from tables.table_config import CountAdmission, EvictionConfig, ProbabilityAdmission, ScoreAdmission

from .save_support import POOL, TTL0, assert_same, config, push, view


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


@pytest.mark.parametrize("mode", ["base", "delta"])
def test_begin_save_holds_the_table_as_of_its_call(tmp_path: Path, mode: Literal["base", "delta"]) -> None:
    rng = np.random.default_rng(5)
    t = SparseTable(config(initial_capacity=16))
    push(t, POOL[:200], rng)
    t.save(tmp_path / "base0")
    push(t, POOL[100:250], rng)
    expected = view(t)
    point = t.begin_save(tmp_path / "snap", mode=mode)
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
    assert t.lock.snapshot is None and not (tmp_path / "dropped").exists()
    t.save(tmp_path / "after", mode="delta")
