"""An id-rows table with a disk tier: the rows its RAM budget has no room for live on disk, a read
takes them from their records without moving them, a write (ring append, put, rate update)
promotes them first, and reads, rates, saves and restores give what the same table all in RAM
gives, bit for bit (random uint64 words, NaN bit patterns among them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables import table_config as tc
from tables.id_rows_kernels import ring_words
from tables.id_rows_table import RATE_WORDS, IdRowsTable, id_rows_config, time_bits

IDS = np.arange(1, 2001, dtype=np.uint64) * np.uint64(0x9E3779B1)
WORDS = ring_words(4)


def table(words: int, tier: Path | None, budget: int) -> IdRowsTable:
    """The all-RAM reference when ``tier`` is None (no budget), else a tiered table whose RAM holds
    ``budget`` bytes."""
    cfg = id_rows_config("ids.test", words,
                         tier=tc.TierConfig(disk=tc.DiskTierConfig(path=str(tier))) if tier is not None else None)
    if tier is not None:
        cfg = cfg.model_copy(update={"eviction": cfg.eviction.model_copy(update={"max_bytes": budget})})
    return IdRowsTable(cfg)


def filled(tmp_path: Path) -> tuple[IdRowsTable, IdRowsTable, np.random.Generator]:
    rng = np.random.default_rng(3)
    ram, tiered = table(WORDS, None, 0), table(WORDS, tmp_path, 150_000)
    for start in range(0, IDS.shape[0], 200):  # every id put once, random bits: the early ones go to disk
        values = rng.integers(0, 2**64, (200, WORDS), dtype=np.uint64)
        for t in (ram, tiered):
            t.put(IDS[start : start + 200], values)
    assert tiered.tier.disk.rows > 800  # about half the ids
    return ram, tiered, rng


def assert_same(ram: IdRowsTable, tiered: IdRowsTable) -> None:
    probe = np.concatenate([IDS, np.array([5, 2**64 - 1], np.uint64)])
    (a, fa), (b, fb) = ram.read(probe), tiered.read(probe)
    np.testing.assert_array_equal(fb, fa)
    np.testing.assert_array_equal(b, a)
    assert tiered.size() == ram.size()


def test_reads_take_disk_rows_in_place_and_match_the_all_ram_table(tmp_path: Path) -> None:
    ram, tiered, _ = filled(tmp_path)
    disk, promoted = tiered.tier.disk.rows, tiered.counters["promoted"]
    assert_same(ram, tiered)
    assert tiered.tier.disk.rows == disk and tiered.counters["promoted"] == promoted  # reading moved nothing
    assert tiered.counters["disk_hits"] >= disk


def test_appends_and_puts_of_disk_rows_promote_them_and_match(tmp_path: Path) -> None:
    ram, tiered, rng = filled(tmp_path)
    cold = IDS[tiered.tier.lookup(IDS) >= 0]
    t0 = 1.7e9
    for _ in range(12):  # appends and puts over both tiers, keys repeated within a call
        keys = np.concatenate([rng.choice(cold, 60), rng.choice(IDS, 60)])
        ids = rng.integers(0, 2**64, keys.shape[0], dtype=np.uint64)
        times = time_bits(t0 + np.arange(keys.shape[0], dtype=np.float64))
        t0 += keys.shape[0]
        values = rng.integers(0, 2**64, (40, WORDS), dtype=np.uint64)
        put = rng.choice(cold, 40)
        for t in (ram, tiered):
            t.append(keys, ids, times)
            t.put(put, values)
    assert tiered.counters["promoted"] > 0
    assert tiered.tier.disk.rows > 0  # promotions demoted other rows: both tiers still hold some
    assert_same(ram, tiered)


def test_rates_read_and_update_rows_of_either_tier(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    ram, tiered = table(RATE_WORDS, None, 0), table(RATE_WORDS, tmp_path, 100_000)
    asked_on_disk = 0
    for step in range(40):
        seen = rng.choice(IDS, 150)  # a long tail: most keys seen rarely, so their rows go to disk
        asked = np.concatenate([rng.choice(IDS, 100), seen[:20]])
        asked_on_disk += int(np.count_nonzero(tiered.tier.lookup(asked) >= 0))
        a = ram.observe_rates(seen, asked, 0.05, observe=step % 7 != 6)
        b = tiered.observe_rates(seen, asked, 0.05, observe=step % 7 != 6)
        np.testing.assert_array_equal(b, a)
    assert tiered.tier.disk.rows > 0 and tiered.counters["promoted"] > 0 and not tiered.counters["refused_by_budget"]
    assert asked_on_disk > 100
    assert_same(ram, tiered)


@pytest.mark.parametrize("into", ["tiered", "ram"])
def test_base_and_delta_saves_hold_both_tiers(tmp_path: Path, into: str) -> None:
    ram, tiered, rng = filled(tmp_path / "tier")
    tiered.save(tmp_path / "base", "base")
    keys = rng.choice(IDS, 300)
    values = rng.integers(0, 2**64, (300, WORDS), dtype=np.uint64)
    for t in (ram, tiered):
        t.put(keys, values)
    tiered.save(tmp_path / "delta", "delta")
    back = table(WORDS, tmp_path / "back", 150_000) if into == "tiered" else table(WORDS, None, 0)
    back.load(tmp_path / "base")
    back.load(tmp_path / "delta")
    if into == "tiered":
        assert back.tier.disk.rows > 0
    assert_same(ram, back)


def test_ttl_reaches_rows_on_disk(tmp_path: Path) -> None:
    tier = tc.TierConfig(disk=tc.DiskTierConfig(path=str(tmp_path)))
    cfg = id_rows_config("ids.test", WORDS, ttl_passes=1, tier=tier)
    t = IdRowsTable(cfg.model_copy(update={"eviction": cfg.eviction.model_copy(update={"max_bytes": 150_000})}))
    values = np.ones((200, WORDS), np.uint64)
    for start in range(0, IDS.shape[0], 200):
        t.put(IDS[start : start + 200], values)
    assert t.tier.disk.rows > 800
    for _ in range(2):
        t.end_pass()
    t.put(IDS[:5], values[:5])  # written again: kept
    assert t.shrink() == IDS.shape[0] - 5
    assert t.tier.disk.rows == 0 and t.read(IDS)[1].sum() == 5


def test_a_write_of_more_keys_than_ram_holds_keeps_every_row(tmp_path: Path) -> None:
    """One put, then one append, of 2,000 keys into a tiered table whose RAM holds a few hundred
    rows: every row is written (in groups of keys that fit RAM, the earlier groups demoted), none
    refused, and each key's entries keep their order."""
    rng = np.random.default_rng(9)
    ram, tiered = table(WORDS, None, 0), table(WORDS, tmp_path, 100_000)
    assert tiered.budget.ram_row_limit() < IDS.shape[0] // 2
    values = rng.integers(0, 2**64, (IDS.shape[0], WORDS), dtype=np.uint64)
    keys = np.concatenate([IDS, IDS[::7]])  # repeats: the last put of a key wins
    values = np.concatenate([values, values[::7] ^ np.uint64(1)])
    for t in (ram, tiered):
        t.put(keys, values)
    assert_same(ram, tiered)
    order = rng.permutation(keys.shape[0])
    items = rng.integers(1, 2**63, keys.shape[0], dtype=np.uint64)
    stamps = time_bits(np.arange(keys.shape[0], dtype=np.float64))
    for t in (ram, tiered):
        t.append(keys[order], items, stamps)
    assert_same(ram, tiered)
    st = tiered.stats()
    assert st["refused_by_budget"] == 0 and st["disk_rows"] > IDS.shape[0] // 2
    assert st["rows"] <= tiered.budget.ram_row_limit()
