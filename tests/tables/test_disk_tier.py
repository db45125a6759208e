"""The disk tier under a sparse table's RAM budget, against the same table all in RAM: the
same pulls and pushes give bit-identical rows whichever tier they passed through; saves hold
both tiers; shrink, the disk budget and a full disk reach the disk rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import DiskFull
from tables.sparse_table import SparseTable
from tables.table_config import (
    DiskTierConfig,
    EvictionConfig,
    InitializerConfig,
    OptimizerConfig,
    TableConfig,
    TierConfig,
)

IDS = np.arange(1, 3001, dtype=np.uint64) * np.uint64(0x9E3779B1)
BUDGET = 400_000  # bytes of RAM: about a thousand rows of dim 16 with Adam state, beside the disk index


def config(tier: Path | None = None, *, ram: int | None = BUDGET, disk_bytes: int = 1 << 30,
           wide: bool = True, **eviction: object) -> TableConfig:
    return TableConfig(
        name="t", dim=16, wide=wide, seed=3, initializer=InitializerConfig(kind="uniform", scale=0.1),
        optimizer=OptimizerConfig(kind="adam", lr=0.01), wide_optimizer=OptimizerConfig(kind="ftrl", lr=0.1),
        eviction=EvictionConfig(max_bytes=ram if tier is not None else None, **eviction),
        tier=TierConfig(disk=DiskTierConfig(path=str(tier), max_bytes=disk_bytes)) if tier is not None else None)


def zipf_keys(rng: np.random.Generator, n: int) -> np.ndarray:
    return IDS[np.minimum(rng.zipf(1.1, n) - 1, IDS.shape[0] - 1)]


def run_ops(tables: list[SparseTable], rng: np.random.Generator, steps: int, *, check: bool = True) -> None:
    """The same pulls and pushes (Zipf keys with repeats, then a uniform sweep) on every table;
    each pull's rows must agree bit for bit."""
    for step in range(steps):
        keys = zipf_keys(rng, 200) if step % 3 else rng.choice(IDS, 200)
        grads = rng.standard_normal((keys.shape[0], tables[0].width)).astype(np.float32)
        shows = rng.integers(1, 3, keys.shape[0]).astype(np.float32)
        pulled = [t.pull(keys) for t in tables]
        if check:
            for other in pulled[1:]:
                np.testing.assert_array_equal(other, pulled[0])
        for t in tables:
            t.push(keys, grads, shows)


def all_rows(t: SparseTable) -> tuple[np.ndarray, np.ndarray]:
    return t.pull_existing(IDS)


def assert_same(a: SparseTable, b: SparseTable) -> None:
    ra, fa = all_rows(a)
    rb, fb = all_rows(b)
    np.testing.assert_array_equal(fa, fb)
    np.testing.assert_array_equal(ra, rb)
    assert a.size() == b.size()
    sa, ca = a.counts(IDS)
    sb, cb = b.counts(IDS)
    np.testing.assert_array_equal(sa, sb)
    np.testing.assert_array_equal(ca, cb)


def test_tiered_rows_match_the_all_ram_table(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config()), SparseTable(config(tmp_path))
    rng = np.random.default_rng(0)
    run_ops([ram, tiered], rng, 60)
    st = tiered.stats()
    assert st["disk_rows"] > 0 and st["demoted"] > 0 and st["promoted"] > 0 and st["disk_reads"] > 0
    assert st["rows"] + st["disk_rows"] == ram.size() == tiered.size()
    assert st["rows"] <= tiered.budget.ram_row_limit()
    assert st["bytes"] + st["disk_index_bytes"] <= BUDGET
    assert st["evicted_by_budget"] == 0 and st["refused_by_budget"] == 0
    assert st["ram_hits"] > 0 and st["disk_hits"] > 0
    assert_same(ram, tiered)
    assert tiered.contains(IDS).sum() == ram.contains(IDS).sum()


def test_a_base_and_a_delta_hold_both_tiers(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config()), SparseTable(config(tmp_path / "a"))
    rng = np.random.default_rng(1)
    run_ops([ram, tiered], rng, 30, check=False)
    tiered.save(tmp_path / "base", "base")
    run_ops([ram, tiered], rng, 10, check=False)
    changed_on_disk = tiered.stats()["disk_rows"]
    manifest = tiered.save(tmp_path / "delta", "delta")
    assert 0 < manifest["rows"] < tiered.size()  # only what changed, wherever it lives
    assert changed_on_disk > 0

    restored = SparseTable(config(tmp_path / "b"))
    restored.load(tmp_path / "base")
    assert restored.stats()["disk_rows"] > 0  # the rows over the RAM budget went to disk
    restored.load(tmp_path / "delta")
    assert_same(ram, restored)
    into_ram = SparseTable(config())
    into_ram.load(tmp_path / "base")
    into_ram.load(tmp_path / "delta")
    assert_same(ram, into_ram)


def test_a_save_is_its_consistent_point_while_rows_move(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config()), SparseTable(config(tmp_path / "a"))
    rng = np.random.default_rng(2)
    run_ops([ram, tiered], rng, 30, check=False)
    expected = ram.pull_existing(IDS)
    save = tiered.begin_save(tmp_path / "base")
    run_ops([ram, tiered], rng, 10)  # promotions free disk records the save still reads
    save.write()
    run_ops([ram, tiered], rng, 10)  # demotions again once the save is written
    assert tiered.stats()["demoted"] > 0
    restored = SparseTable(config())
    restored.load(tmp_path / "base")
    rows, found = restored.pull_existing(IDS)
    np.testing.assert_array_equal(found, expected[1])
    np.testing.assert_array_equal(rows, expected[0])


def test_shrink_reaches_disk_rows(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config()), SparseTable(config(tmp_path))
    rng = np.random.default_rng(3)
    run_ops([ram, tiered], rng, 20, check=False)
    for t in (ram, tiered):
        t.end_pass()
    run_ops([ram, tiered], rng, 3, check=False)
    policy = EvictionConfig(ttl_passes=0)
    on_disk = tiered.stats()["disk_rows"]
    assert tiered.shrink(policy=policy) == ram.shrink(policy=policy) > 0
    assert tiered.stats()["disk_rows"] < on_disk
    assert_same(ram, tiered)


def test_a_full_disk_tier_evicts_its_coldest_rows(tmp_path: Path) -> None:
    record = 4 * (17 + 2 * 16 + 2 + 2)  # params (wide + dim), adam state, ftrl state
    tiered = SparseTable(config(tmp_path, disk_bytes=200 * record))
    run_ops([tiered], np.random.default_rng(4), 40)
    st = tiered.stats()
    assert st["disk_evicted"] > 0
    assert st["disk_rows"] <= 200
    assert st["disk_bytes"] <= 200 * record


def test_a_disk_that_refuses_to_grow_is_counted_and_ram_serves(tmp_path: Path, monkeypatch) -> None:
    tiered = SparseTable(config(tmp_path))

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tables.disk_tier.os.posix_fallocate", no_space)
    with pytest.raises(DiskFull, match="no room to grow"):
        tiered.tier.disk.put({name: col[:1] for name, col in tiered.state.rows.cols.items()})
    rng = np.random.default_rng(5)
    run_ops([tiered], rng, 60)
    st = tiered.stats()
    assert st["disk_full"] > 0 and st["disk_rows"] == 0
    assert st["evicted_by_budget"] > 0  # the table's own rule once the disk takes nothing
    assert st["rows"] <= tiered.budget.ram_row_limit()
    assert tiered.pull(IDS[:5]).shape == (5, 17)


def test_each_tier_has_a_file_of_its_own_and_a_dead_ones_file_goes(tmp_path: Path) -> None:
    first, second = SparseTable(config(tmp_path)), SparseTable(config(tmp_path))
    run_ops([first, second], np.random.default_rng(6), 10)
    files = sorted(tmp_path.glob("t.*.tier"))
    assert len(files) == 2 and first.tier.disk.path != second.tier.disk.path
    left = tmp_path / "t.999999-0.tier"  # a crashed process's: nobody holds its lock
    left.write_bytes(b"x" * 4096)
    third = SparseTable(config(tmp_path))
    assert not left.exists() and first.tier.disk.path.exists() and third.tier.disk.path.exists()
    second.tier.close()
    assert not second.tier.disk.path.exists()


def test_serving_reads_disk_rows_without_moving_them(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config()), SparseTable(config(tmp_path))
    run_ops([ram, tiered], np.random.default_rng(7), 30, check=False)
    on_disk = IDS[tiered.tier.lookup(IDS) >= 0]
    assert on_disk.shape[0] > 0
    before = tiered.stats()
    rows, found = tiered.pull_existing(on_disk)
    expected, _ = ram.pull_existing(on_disk)
    assert found.all()
    np.testing.assert_array_equal(rows, expected)
    assert tiered.contains(on_disk).all()
    after = tiered.stats()
    assert (after["disk_rows"], after["promoted"]) == (before["disk_rows"], before["promoted"])
    tiered.tier.second_read.forget()  # the pulls above marked rows their pushes left on disk
    np.testing.assert_array_equal(tiered.pull(on_disk), expected)  # a first training pull reads them in place
    first = tiered.stats()
    assert (first["disk_rows"], first["promoted"]) == (before["disk_rows"], before["promoted"])
    np.testing.assert_array_equal(tiered.pull(on_disk), expected)  # a second read promotes (ids whose marks stayed)
    assert tiered.stats()["promoted"] > before["promoted"]
