"""A push updates the disk rows it finds in their records, without moving them: the rows are
bit-identical to the same table all in RAM under every optimizer, a delta save holds them, a
restore of the saves brings them back, the changed-keys log lists them, TTL sees their new
last-seen pass, and while a save reads the records a push promotes its disk rows instead."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables import table_config as tc
from tables.sparse_table import SparseTable

IDS = np.arange(1, 3001, dtype=np.uint64) * np.uint64(0x9E3779B1)
BUDGET = 250_000  # bytes of RAM: a few hundred rows, the rest of IDS on disk

OPTIMIZERS = {
    "sgd": tc.OptimizerConfig(kind="sgd", lr=0.05, l2=0.001, grad_clip=1.0),
    "adagrad": tc.OptimizerConfig(kind="adagrad", lr=0.05),
    "adagrad_element": tc.OptimizerConfig(kind="adagrad", lr=0.05, accumulator="element"),
    "adam": tc.OptimizerConfig(kind="adam", lr=0.01),
    "ftrl": tc.OptimizerConfig(kind="ftrl", lr=0.1, l1=0.01),
}


def config(optimizer: str, tier: Path | None, *, wide: bool = False, **eviction: object) -> tc.TableConfig:
    return tc.TableConfig(
        name="t", dim=8, wide=wide, seed=5, initializer=tc.InitializerConfig(kind="uniform", scale=0.1),
        optimizer=OPTIMIZERS[optimizer], wide_optimizer=tc.OptimizerConfig(kind="ftrl", lr=0.1),
        eviction=tc.EvictionConfig(max_bytes=BUDGET if tier is not None else None, **eviction),
        tier=tc.TierConfig(disk=tc.DiskTierConfig(path=str(tier))) if tier is not None else None)


def fill(tables: list[SparseTable]) -> None:
    """Every id pushed once, in batches that each fit RAM: the early ones go to disk."""
    grads = np.full((100, tables[0].width), 0.01, np.float32)
    for start in range(0, IDS.shape[0], 100):
        for t in tables:
            t.push(IDS[start : start + 100], grads)


def on_disk(t: SparseTable) -> np.ndarray:
    return IDS[t.tier.lookup(IDS) >= 0]


def optimizer_state(t: SparseTable) -> np.ndarray:
    """The ``state`` and ``wide_state`` of every stored id of IDS, from whichever tier holds it."""
    rows = t.lookup_rows(IDS)
    cols = t.state.rows.cols
    out = np.full((IDS.shape[0], cols["state"].shape[1] + cols["wide_state"].shape[1]), np.nan, np.float32)
    out[rows >= 0] = np.hstack([cols["state"][rows[rows >= 0]], cols["wide_state"][rows[rows >= 0]]])
    if t.tier is not None:
        at = t.tier.lookup(IDS)
        disk = t.tier.disk.read(at[at >= 0], ("state", "wide_state"))
        out[at >= 0] = np.hstack([disk["state"], disk["wide_state"]])
    return out


def assert_same(ram: SparseTable, tiered: SparseTable) -> None:
    np.testing.assert_array_equal(optimizer_state(tiered), optimizer_state(ram))
    a, b = ram.pull_existing(IDS), tiered.pull_existing(IDS)
    np.testing.assert_array_equal(b[1], a[1])
    np.testing.assert_array_equal(b[0], a[0])
    for x, y in zip(ram.counts(IDS), tiered.counts(IDS), strict=True):
        np.testing.assert_array_equal(y, x)
    assert ram.size() == tiered.size()


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("wide", [False, True])
def test_pushes_of_disk_rows_match_the_all_ram_table_and_move_nothing(tmp_path: Path, optimizer: str,
                                                                      wide: bool) -> None:
    ram, tiered = SparseTable(config(optimizer, None, wide=wide)), SparseTable(config(optimizer, tmp_path, wide=wide))
    fill([ram, tiered])
    disk = on_disk(tiered)
    assert disk.shape[0] > 250
    rng = np.random.default_rng(0)
    before = tiered.stats()
    for step in range(12):
        # disk rows with repeats (summed first), a few RAM rows, and ids neither table has yet
        keys = np.concatenate([rng.choice(disk, 400), IDS[tiered.lookup_rows(IDS) >= 0][:20],
                               np.arange(step * 10 + 1, step * 10 + 11, dtype=np.uint64)])
        grads = rng.standard_normal((keys.shape[0], ram.width)).astype(np.float32)
        shows = rng.integers(1, 4, keys.shape[0]).astype(np.float32)
        clicks = (rng.random(keys.shape[0]) < 0.3).astype(np.float32)
        for t in (ram, tiered):
            t.push(keys, grads, shows, clicks)
        if step % 4 == 3:
            for t in (ram, tiered):
                t.end_pass()  # show/click decay across passes
    after = tiered.stats()
    assert after["promoted"] == before["promoted"]  # pushes alone move nothing into RAM
    assert after["updated_on_disk"] - before["updated_on_disk"] >= np.unique(disk).shape[0] // 2
    assert after["rows"] <= tiered.budget.ram_row_limit()
    assert_same(ram, tiered)
    np.testing.assert_array_equal(tiered.pull(IDS), ram.pull(IDS))


def test_a_push_that_promises_unique_keys_and_repeats_disk_ids_sums_them(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config("adam", None)), SparseTable(config("adam", tmp_path))
    fill([ram, tiered])
    keys = np.repeat(on_disk(tiered)[:50], 2)
    grads = np.random.default_rng(1).standard_normal((keys.shape[0], ram.width)).astype(np.float32)
    ram.push(keys, grads)
    tiered.push(keys, grads, unique=True)  # a broken promise: the repeated ids are found and summed
    assert_same(ram, tiered)


def test_a_delta_save_holds_the_disk_rows_a_push_updated_and_a_restore_brings_them_back(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config("adagrad", None)), SparseTable(config("adagrad", tmp_path / "a"))
    fill([ram, tiered])
    tiered.save(tmp_path / "base", "base")
    keys = on_disk(tiered)[:300]
    grads = np.full((keys.shape[0], ram.width), 0.5, np.float32)
    for t in (ram, tiered):
        t.push(keys, grads)
    assert (tiered.tier.lookup(keys) >= 0).all()  # updated where they live
    manifest = tiered.save(tmp_path / "delta", "delta")
    assert manifest["rows"] == keys.shape[0]  # exactly the rows the push changed

    for target in (SparseTable(config("adagrad", tmp_path / "b")), SparseTable(config("adagrad", None))):
        target.load(tmp_path / "base")
        target.load(tmp_path / "delta")
        assert_same(ram, target)


def test_the_changed_keys_log_lists_disk_rows_a_push_updated(tmp_path: Path) -> None:
    tiered = SparseTable(config("sgd", tmp_path))
    fill([tiered])
    start = tiered.changes.read(0, 0, 0)  # the first read activates the log
    disk, ram_rows = on_disk(tiered)[:30], IDS[tiered.lookup_rows(IDS) >= 0][:5]
    keys = np.concatenate([disk, ram_rows])
    tiered.push(keys, np.ones((keys.shape[0], tiered.width), np.float32))
    got = tiered.changes.read(start.generation, start.seq, 1000)
    assert not got.reset and sorted(got.keys.tolist()) == sorted(keys.tolist())


def test_ttl_keeps_the_disk_rows_a_push_updated_in_a_later_pass(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config("adam", None)), SparseTable(config("adam", tmp_path))
    fill([ram, tiered])
    for t in (ram, tiered):
        t.end_pass()
        t.end_pass()
    keys = on_disk(tiered)[:200]
    for t in (ram, tiered):
        t.push(keys, np.full((keys.shape[0], t.width), 0.1, np.float32))
    policy = tc.EvictionConfig(ttl_passes=1)
    assert tiered.shrink(policy=policy) == ram.shrink(policy=policy) == IDS.shape[0] - keys.shape[0]
    assert tiered.contains(keys).all()
    assert_same(ram, tiered)


def test_a_push_while_a_save_reads_the_records_promotes_and_the_save_keeps_its_point(tmp_path: Path) -> None:
    ram, tiered = SparseTable(config("adam", None)), SparseTable(config("adam", tmp_path / "a"))
    fill([ram, tiered])
    expected = ram.pull_existing(IDS)
    keys = on_disk(tiered)[:100]
    grads = np.full((keys.shape[0], ram.width), 0.3, np.float32)
    save = tiered.begin_save(tmp_path / "base")
    before = tiered.stats()
    for t in (ram, tiered):
        t.push(keys, grads)
    st = tiered.stats()
    assert st["updated_on_disk"] == before["updated_on_disk"]  # the records stay as the save's point held them
    assert st["promoted"] - before["promoted"] == keys.shape[0]
    save.write()
    restored = SparseTable(config("adam", None))
    restored.load(tmp_path / "base")
    rows, found = restored.pull_existing(IDS)
    np.testing.assert_array_equal(found, expected[1])
    np.testing.assert_array_equal(rows, expected[0])
    assert_same(ram, tiered)
    assert tiered.stats()["rows"] <= tiered.budget.ram_row_limit()  # the save's end moved RAM back under budget


def test_on_a_disk_that_refuses_to_grow_pushes_still_update_disk_rows_and_demotions_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tables.disk_tier.GROW_RECORDS", 1)  # the file grows little ahead of its records
    ram, tiered = SparseTable(config("adam", None)), SparseTable(config("adam", tmp_path))
    fill([ram, tiered])
    keys = on_disk(tiered)[:200]

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tables.disk_tier.os.posix_fallocate", no_space)
    new = np.arange(1, 2001, dtype=np.uint64)  # ids no table has: RAM must demote for them
    for start in range(0, new.shape[0], 200):
        batch = np.concatenate([keys, new[start : start + 200]])
        for t in (ram, tiered):
            t.push(batch, np.full((batch.shape[0], t.width), 0.2, np.float32))
    st = tiered.stats()
    assert st["disk_full"] > 0 and st["evicted_by_budget"] > 0  # the budget's own rule once the disk took none
    assert st["rows"] <= tiered.budget.ram_row_limit()
    assert (tiered.tier.lookup(keys) >= 0).all()  # an update in place needs no room
    np.testing.assert_array_equal(tiered.pull_existing(keys)[0], ram.pull_existing(keys)[0])


@pytest.mark.parametrize("optimizer", ["adam", "ftrl"])
def test_a_push_of_more_new_ids_than_ram_holds_creates_the_rest_on_disk(tmp_path: Path, optimizer: str) -> None:
    """RAM's row limit is about half of the 3,000 new ids one push brings: the ones RAM has no
    room for even emptied are created and updated on disk, none refused, all as in RAM."""
    ram, tiered = SparseTable(config(optimizer, None)), SparseTable(config(optimizer, tmp_path))
    limit = tiered.budget.ram_row_limit()
    assert limit < IDS.shape[0]
    rng = np.random.default_rng(1)
    for step in range(3):
        keys = np.concatenate([IDS, IDS[: 50 * (step + 1)]])  # repeats, summed first
        grads = rng.standard_normal((keys.shape[0], ram.width)).astype(np.float32)
        shows = rng.integers(1, 4, keys.shape[0]).astype(np.float32)
        clicks = (rng.random(keys.shape[0]) < 0.3).astype(np.float32)
        for t in (ram, tiered):
            t.push(keys, grads, shows, clicks)
    st = tiered.stats()
    assert st["refused_by_budget"] == 0 and st["created_on_disk"] >= IDS.shape[0] - limit
    assert st["rows"] <= tiered.budget.ram_row_limit() and tiered.size() == IDS.shape[0]
    assert_same(ram, tiered)
    np.testing.assert_array_equal(tiered.pull(IDS), ram.pull(IDS))


def test_new_ids_ram_has_no_room_for_are_refused_and_counted_when_the_disk_is_full(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    tiered = SparseTable(config("adam", tmp_path))

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tables.disk_tier.os.posix_fallocate", no_space)
    tiered.push(IDS, np.full((IDS.shape[0], tiered.width), 0.01, np.float32))
    st = tiered.stats()
    limit = tiered.budget.ram_row_limit()
    assert st["disk_full"] > 0 and st["disk_rows"] == 0 and st["created_on_disk"] == 0
    assert st["rows"] <= limit and st["refused_by_budget"] == IDS.shape[0] - st["rows"]
    assert tiered.pull(IDS[:5]).shape == (5, tiered.width)  # RAM keeps serving
