"""Which disk rows a pull promotes (:mod:`tables.promotion`): the marks kernel against a slow
reference, and a tiered table whose pulls read disk rows in place until a second read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables import promotion
from tables.hashmap import hash_keys, new_hash_key
from tables.promotion import SecondRead
from tables.sparse_table import SparseTable
from tables.table_config import DiskTierConfig, EvictionConfig, OptimizerConfig, TableConfig, TierConfig


def reference_earned(marks: dict[int, int], slots: int, hkey: np.ndarray, keys: np.ndarray,
                     repeated: np.ndarray) -> np.ndarray:
    """The rule one key at a time: a key earns promotion when its slot holds its mark or the
    read holds it twice; an earned key's mark goes, another's is set."""
    hashes = np.empty(keys.shape[0], np.uint64)
    hash_keys(keys, hkey, hashes)
    out = np.zeros(keys.shape[0], np.bool_)
    for i, h in enumerate(hashes.tolist()):
        slot, mark = h & (slots - 1), (h >> 32) | 1
        if marks.get(slot) == mark:
            del marks[slot]
            out[i] = True
        elif repeated[i]:
            out[i] = True
        else:
            marks[slot] = mark
    return out


def test_marks_match_the_reference_batch_after_batch() -> None:
    rng = np.random.default_rng(5)
    hkey = new_hash_key()
    slots = 256  # small: keys share slots, and a later key's mark replaces an earlier one's
    fast, ref = SecondRead(hkey, slots), {}
    pool = rng.integers(1, 1 << 63, 2000, dtype=np.uint64)
    earned_total = 0
    for _ in range(40):
        keys = np.unique(rng.choice(pool[: rng.integers(50, 2000)], 300))
        repeated = rng.random(keys.shape[0]) < 0.1
        got = fast.earned(keys, repeated)
        np.testing.assert_array_equal(got, reference_earned(ref, slots, hkey, keys, repeated))
        earned_total += int(got.sum())
    marks = np.zeros(slots, np.uint32)
    for slot, mark in ref.items():
        marks[slot] = mark
    np.testing.assert_array_equal(fast.marks, marks)
    assert earned_total > 0


def test_a_key_earns_promotion_on_its_second_read_only() -> None:
    rule = SecondRead(new_hash_key(), 1 << 10)
    keys = np.array([11, 22, 33], np.uint64)
    assert not rule.earned(keys).any()  # first reads: marked
    assert rule.earned(keys).all()  # second reads: earned, marks cleared
    assert not rule.earned(keys).any()  # a promoted row that comes back to disk starts again
    rule.forget()
    assert not rule.earned(keys).any()
    assert rule.earned(np.empty(0, np.uint64)).shape == (0,)
    other = np.array([44], np.uint64)
    assert rule.earned(other, np.array([True])).all()  # held twice by one pull: read twice already
    assert not rule.earned(other).any()  # and no mark of it was left


def test_marks_are_a_small_share_of_the_budget() -> None:
    assert promotion.slots_for(None) == promotion.UNBUDGETED_SLOTS
    assert promotion.slots_for(0) == 16
    assert promotion.slots_for(1 << 40) == promotion.MAX_SLOTS
    for budget in (10_000, 400_000, 64 << 20, 128 << 20):
        slots = promotion.slots_for(budget)
        assert slots & (slots - 1) == 0
        assert slots == 16 or slots * 4 <= budget * promotion.BUDGET_SHARE
    with pytest.raises(ValueError, match="power of two"):
        SecondRead(new_hash_key(), 100)


IDS = np.arange(1, 3001, dtype=np.uint64) * np.uint64(0x9E3779B1)


def config(tier: Path | None) -> TableConfig:
    return TableConfig(name="t", dim=8, seed=1, optimizer=OptimizerConfig(kind="adam", lr=0.01),
                       eviction=EvictionConfig(max_bytes=200_000 if tier is not None else None),
                       tier=TierConfig(disk=DiskTierConfig(path=str(tier))) if tier is not None else None)


def filled(tmp_path: Path) -> tuple[SparseTable, SparseTable]:
    ram, tiered = SparseTable(config(None)), SparseTable(config(tmp_path))
    grads = np.full((100, ram.width), 0.01, np.float32)
    for start in range(0, IDS.shape[0], 100):  # in batches: a push's own new rows never make room for each other
        for t in (ram, tiered):
            t.push(IDS[start : start + 100], grads)
    assert tiered.stats()["disk_rows"] > 1000
    return ram, tiered


def test_a_pull_reads_disk_rows_in_place_and_a_second_read_promotes(tmp_path: Path) -> None:
    ram, tiered = filled(tmp_path)
    on_disk = IDS[tiered.tier.lookup(IDS) >= 0][:40]
    assert on_disk.shape[0] == 40
    absent = np.array([7, 8], np.uint64)  # in neither tier: initializer rows
    keys = np.concatenate([on_disk, on_disk[:5], absent, IDS[tiered.lookup_rows(IDS) >= 0][:3]])
    before = tiered.stats()
    np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))
    first = tiered.stats()
    assert first["promoted"] - before["promoted"] == 5  # the keys the pull holds twice: read twice already
    assert first["disk_hits"] - before["disk_hits"] == 40  # each unique disk key read once
    assert first["rejected_pulls"] - before["rejected_pulls"] == 2
    assert (tiered.lookup_rows(on_disk[:5]) >= 0).all()
    assert (tiered.tier.lookup(on_disk[5:]) >= 0).all()  # read once: still on disk
    keys = keys[5:]

    np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))
    second = tiered.stats()
    promoted = second["promoted"] - first["promoted"]
    assert promoted > 0  # the keys whose marks no other key replaced (the marks are few here)
    in_ram = tiered.lookup_rows(on_disk) >= 0
    on_disk_now = tiered.tier.lookup(on_disk) >= 0
    assert not (in_ram & on_disk_now).any() and (in_ram | on_disk_now).all()  # each row in exactly one tier
    assert in_ram.sum() == promoted + 5
    assert tiered.size() == ram.size()


def test_rows_read_in_place_then_pushed_match_the_all_ram_table(tmp_path: Path) -> None:
    ram, tiered = filled(tmp_path)
    rng = np.random.default_rng(3)
    for step in range(30):
        keys = IDS[np.minimum(rng.zipf(1.1, 300) - 1, IDS.shape[0] - 1)] if step % 2 else rng.choice(IDS, 300)
        np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))
        if step % 3 == 0:  # pulls alone in between: rows stay where they were read
            grads = rng.standard_normal((keys.shape[0], ram.width)).astype(np.float32)
            for t in (ram, tiered):
                t.push(keys, grads)
    st = tiered.stats()
    assert st["promoted"] > 0 and st["disk_hits"] > st["promoted"]
    assert st["bytes"] + st["disk_index_bytes"] <= 200_000
    np.testing.assert_array_equal(tiered.pull_existing(IDS)[0], ram.pull_existing(IDS)[0])
    assert tiered.size() == ram.size()


def test_a_pull_of_more_disk_rows_than_a_chunk_matches_the_all_ram_table(tmp_path: Path) -> None:
    def small(tier: Path | None) -> TableConfig:
        return TableConfig(name="s", dim=2, seed=4, optimizer=OptimizerConfig(kind="adam", lr=0.01),
                           eviction=EvictionConfig(max_bytes=1_500_000 if tier is not None else None),
                           tier=TierConfig(disk=DiskTierConfig(path=str(tier))) if tier is not None else None)

    ram, tiered = SparseTable(small(None)), SparseTable(small(tmp_path))
    ids = np.arange(1, 40_001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for start in range(0, ids.shape[0], 1000):
        for t in (ram, tiered):
            t.push(ids[start : start + 1000], np.full((1000, t.width), 0.5, np.float32))
    assert tiered.stats()["disk_rows"] > 1 << 14  # three chunks of disk rows in one pull
    assert tiered.size() == ram.size()
    rng = np.random.default_rng(9)
    keys = rng.permutation(np.concatenate([ids, ids[:5000], np.arange(1, 101, dtype=np.uint64)]))
    for _ in range(2):  # the first reads in place (and promotes the repeated), the second promotes
        before = tiered.stats()
        np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))
        after = tiered.stats()
        assert after["rejected_pulls"] - before["rejected_pulls"] == 100
        in_ram, on_disk = tiered.lookup_rows(ids) >= 0, tiered.tier.lookup(ids) >= 0
        assert not (in_ram & on_disk).any() and (in_ram | on_disk).all()
    assert after["promoted"] > 0 and after["disk_rows"] > 0


def test_a_key_whose_index_tag_matches_a_disk_row_reads_as_absent(tmp_path: Path) -> None:
    from tests.tables.test_disk_index import same_tag_pair

    ram, tiered = filled(tmp_path)
    on_disk, absent = same_tag_pair(tiered.state.hash_key)
    with tiered.lock.mutex:
        tiered.push(np.array([on_disk]), np.ones((1, tiered.width), np.float32))
        ram.push(np.array([on_disk]), np.ones((1, ram.width), np.float32))
        tiered.tier.demote(tiered.lookup_rows(np.array([on_disk])))
    assert tiered.tier.lookup(np.array([on_disk]))[0] >= 0
    keys = np.array([absent, on_disk, absent], np.uint64)
    before = tiered.stats()["rejected_pulls"]
    np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))
    assert tiered.stats()["rejected_pulls"] - before == 2
    np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))  # absent's two reads promote nothing of it
    assert not tiered.contains(np.array([absent]))[0]


def test_a_push_after_a_pull_updates_the_rows_the_pull_read_in_place(tmp_path: Path) -> None:
    ram, tiered = filled(tmp_path)
    n = 64
    keys = IDS[tiered.tier.lookup(IDS) >= 0][:n]
    assert keys.shape[0] == n
    grads = np.full((n, ram.width), 0.25, np.float32)
    for step in range(3):  # read in place and pushed in place, three times over
        tiered.tier.second_read.forget()  # a first read each time: read in place
        before = tiered.stats()
        np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))
        after = tiered.stats()
        assert after["disk_reads"] - before["disk_reads"] == n and after["promoted"] == before["promoted"]
        assert (tiered.tier.lookup(keys) >= 0).all()  # left on disk
        for t in (ram, tiered):
            t.push(keys, grads * (step + 1))
        pushed = tiered.stats()
        assert (tiered.tier.lookup(keys) >= 0).all() and pushed["promoted"] == after["promoted"]
        assert pushed["updated_on_disk"] - after["updated_on_disk"] == n
    np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))  # a second read promotes
    assert (tiered.lookup_rows(keys) >= 0).any()  # those whose marks no other key replaced (the marks are few)
    np.testing.assert_array_equal(tiered.pull_existing(IDS)[0], ram.pull_existing(IDS)[0])
    np.testing.assert_array_equal(tiered.pull(IDS), ram.pull(IDS))
    assert tiered.stats()["bytes"] + tiered.stats()["disk_index_bytes"] <= 200_000


def test_a_pull_taken_in_parts_matches_the_all_ram_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tables.tiering.PULL_CHUNK", 64)  # many parts: later parts find rows earlier ones moved
    ram, tiered = filled(tmp_path)
    rng = np.random.default_rng(11)
    disk = IDS[tiered.tier.lookup(IDS) >= 0]
    for _ in range(6):
        keys = rng.permutation(np.concatenate([rng.choice(disk, 500), rng.choice(IDS, 500),
                                               np.array([7, 8], np.uint64)]))
        before = tiered.stats()["rejected_pulls"]
        np.testing.assert_array_equal(tiered.pull(keys), ram.pull(keys))
        assert tiered.stats()["rejected_pulls"] - before == 2
        in_ram, on_disk = tiered.lookup_rows(IDS) >= 0, tiered.tier.lookup(IDS) >= 0
        assert not (in_ram & on_disk).any() and (in_ram | on_disk).all()
    st = tiered.stats()
    assert st["promoted"] > 0 and st["demoted"] > 0
    assert st["bytes"] + st["disk_index_bytes"] <= 200_000
