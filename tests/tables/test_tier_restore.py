"""Restoring a save four times a tiered table's RAM budget: RAM never holds more than the
budget while the rows come, the hottest rows end in RAM and the rest on disk, every row once
and bit-identical to the saved one, and the table then behaves as the all-RAM table loaded
from the same save (pulls, pushes, the next delta)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables import eviction
from tables.budget import table_bytes
from tables.sparse_table import SparseTable
from tables.table_state import TableState
from tables.tiering import TableTier
from tests.tables.test_disk_tier import BUDGET, config

ROWS = 5000  # about four times what BUDGET holds in RAM beside the disk index
IDS = np.arange(1, ROWS + 1, dtype=np.uint64) * np.uint64(0x9E3779B1)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A base of ROWS rows, each pushed once with a show of its own (distinct eviction scores),
    then a delta: some rows pushed again, some evicted (tombstones), some new."""
    t = SparseTable(config())  # all in RAM, the budget's bytes unbounded
    t.set_policy(eviction={"max_bytes": None})
    rng = np.random.default_rng(1)
    keys = IDS[: ROWS - 200]
    shows = rng.permutation(keys.shape[0]).astype(np.float32) + 1
    t.push(keys, rng.standard_normal((keys.shape[0], t.width)).astype(np.float32), shows)
    t.save(tmp_path / "base", "base")
    again = np.concatenate([keys[rng.choice(keys.shape[0], 300, replace=False)], IDS[ROWS - 200 : ROWS]])
    t.push(again, rng.standard_normal((again.shape[0], t.width)).astype(np.float32))
    assert t.shrink(policy=eviction_policy(t)) > 0
    t.save(tmp_path / "delta", "delta")
    return tmp_path


def eviction_policy(t: SparseTable):
    """A shrink of the rows shown fewer than 200 times (score 20): some of each tier once restored."""
    return t.config.eviction.model_copy(update={"delete_threshold": 20.0})


def restored(path: Path, tier: Path | None) -> SparseTable:
    t = SparseTable(config(tier))
    if tier is None:
        t.set_policy(eviction={"max_bytes": None})
    t.load(path / "base")
    t.load(path / "delta")
    return t


def same_ops(tables: list[SparseTable], rng: np.random.Generator, steps: int) -> np.ndarray:
    """The same pulls and pushes (Zipf keys with repeats, then uniform ones) on every table;
    each pull's rows must agree bit for bit. Returns the keys pushed."""
    pushed = []
    for step in range(steps):
        keys = IDS[np.minimum(rng.zipf(1.1, 300) - 1, ROWS - 1)] if step % 3 else rng.choice(IDS, 300)
        grads = rng.standard_normal((keys.shape[0], tables[0].width)).astype(np.float32)
        pulled = [t.pull(keys) for t in tables]
        for other in pulled[1:]:
            np.testing.assert_array_equal(other, pulled[0])
        for t in tables:
            t.push(keys, grads)
        pushed.append(keys)
    return np.unique(np.concatenate(pushed))


def rows_of(t: SparseTable) -> dict[str, np.ndarray]:
    """Every column of every row in either tier, ordered by key; the keys of RAM and disk apart."""
    st = t.state
    parts = [{name: col[: st.rows.n].copy() for name, col in st.rows.cols.items()}]
    if t.tier is not None:
        parts.append(t.tier.disk.read(t.tier.disk.live_records()))
    cols = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    order = np.argsort(cols["keys"], kind="stable")
    return {name: col[order] for name, col in cols.items()}


def test_a_restore_keeps_ram_within_its_budget_throughout(saved: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampled at every upsert (RAM at its fullest) and around every demotion (whose writes
    grow the disk index before the store gives its share back): the table's RAM bytes."""
    filled: list[int] = []
    moving: list[int] = []
    tables: list[SparseTable] = []

    def held(into: list[int]) -> None:
        if tables:
            t = tables[0]
            assert t.tier is not None
            into.append(table_bytes(t.state) + t.tier.ram_bytes())

    upsert, demote = TableState.upsert, TableTier.demote

    def upsert_and_count(self: TableState, cols: dict[str, np.ndarray]) -> None:
        upsert(self, cols)
        held(filled)

    def demote_and_count(self: TableTier, victims: np.ndarray, **kw: object) -> int:
        held(moving)
        moved = demote(self, victims, **kw)
        held(moving)
        return moved

    monkeypatch.setattr(TableState, "upsert", upsert_and_count)
    monkeypatch.setattr(TableTier, "demote", demote_and_count)
    t = SparseTable(config(tmp_path / "tier"))
    limit, row_bytes = t.budget.ram_row_limit(), t.state.rows.row_nbytes()
    tables.append(t)
    t.load(saved / "base")
    t.load(saved / "delta")
    st = t.stats()
    assert st["disk_rows"] > 2 * st["rows"] > 0 and st["demoted"] > 0
    assert len(filled) > 10 and max(filled) <= BUDGET, (max(filled), BUDGET)
    batch = int(limit * (1 - t.config.tier.low_water) + 1) * row_bytes  # one demotion's rows
    assert len(moving) > 10 and max(moving) <= BUDGET + batch, (max(moving), BUDGET, batch)
    assert st["bytes"] + st["disk_index_bytes"] <= BUDGET
    # the same load into the all-RAM layout holds the whole save: four times the budget and more
    ram = restored(saved, None)
    assert table_bytes(ram.state) > 3 * BUDGET


def test_every_row_is_in_one_tier_as_saved_and_the_hottest_in_ram(saved: Path, tmp_path: Path) -> None:
    ram, tiered = restored(saved, None), restored(saved, tmp_path / "tier")
    want, got = rows_of(ram), rows_of(tiered)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)  # each key once: the keys agree
    in_ram = tiered.state.rows.cols["keys"][: tiered.state.rows.n]
    assert not np.isin(in_ram, tiered.tier.disk.read(tiered.tier.disk.live_records(), ("keys",))["keys"]).any()
    np.testing.assert_array_equal(np.sort(tiered.state.tomb_keys), np.sort(ram.state.tomb_keys))
    np.testing.assert_array_equal(np.sort(tiered.state.tomb_epochs), np.sort(ram.state.tomb_epochs))
    # the base's hottest rows (as many as the low water keeps) never left RAM
    base = restored_base(saved, tmp_path / "tier-base")
    cols = rows_of(base)
    score = eviction.score(eviction.decayed(cols["show"], cols["last_seen"], base.current_pass, 1.0),
                           eviction.decayed(cols["click"], cols["last_seen"], base.current_pass, 1.0),
                           base.config.eviction.nonclick_coeff, base.config.eviction.click_coeff)
    keep = int(base.budget.ram_row_limit() * base.config.tier.low_water)
    hottest = cols["keys"][np.argsort(-score, kind="stable")[:keep]]
    assert keep > 0 and np.isin(hottest, base.state.rows.cols["keys"][: base.state.rows.n]).all()


def restored_base(path: Path, tier: Path) -> SparseTable:
    t = SparseTable(config(tier))
    t.load(path / "base")
    assert t.stats()["disk_rows"] > 0
    return t


def test_after_a_restore_pulls_pushes_and_the_next_delta_match_the_all_ram_table(saved: Path,
                                                                                tmp_path: Path) -> None:
    ram, tiered = restored(saved, None), restored(saved, tmp_path / "tier")
    pushed = same_ops([ram, tiered], np.random.default_rng(2), 10)
    np.testing.assert_array_equal(tiered.pull(IDS), ram.pull(IDS))
    assert tiered.size() == ram.size()
    a = ram.save(tmp_path / "ram-next", "delta")
    b = tiered.save(tmp_path / "tiered-next", "delta")
    assert b["rows"] == a["rows"] == pushed.shape[0] < ram.size() // 2  # what the ops changed, in either tier
    again_ram, again_tiered = SparseTable(config()), SparseTable(config(tmp_path / "tier-again"))
    again_ram.set_policy(eviction={"max_bytes": None})
    for t, nxt in ((again_ram, "ram-next"), (again_tiered, "tiered-next")):
        t.load(saved / "base")
        t.load(saved / "delta")
        t.load(tmp_path / nxt)
    for name, col in rows_of(again_ram).items():
        np.testing.assert_array_equal(rows_of(again_tiered)[name], col, err_msg=name)


def test_a_restore_onto_a_disk_that_refuses_to_grow_keeps_every_row_in_ram(saved: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tables.disk_tier.os.posix_fallocate", no_space)
    ram, tiered = restored(saved, None), restored(saved, tmp_path / "tier")
    st = tiered.stats()
    assert st["disk_full"] > 0 and st["disk_rows"] == 0 and st["rows"] == ram.size()  # nothing lost
    for name, col in rows_of(ram).items():
        np.testing.assert_array_equal(rows_of(tiered)[name], col, err_msg=name)


def test_a_restore_into_a_table_whose_first_capacity_is_past_its_budget_stays_within_it(
        saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = SparseTable(config(tmp_path / "tier").model_copy(update={"initial_capacity": 4 * ROWS}))
    held: list[int] = []
    upsert = TableState.upsert

    def upsert_and_count(self: TableState, cols: dict[str, np.ndarray]) -> None:
        upsert(self, cols)
        assert t.tier is not None
        held.append(table_bytes(t.state) + t.tier.ram_bytes())

    monkeypatch.setattr(TableState, "upsert", upsert_and_count)
    t.load(saved / "base")
    st = t.stats()
    assert held and max(held) <= BUDGET and st["rows"] + st["disk_rows"] == ROWS - 200


def test_a_table_made_of_parts_of_tiered_tables_holds_their_disk_rows(saved: Path, tmp_path: Path) -> None:
    from tables.table_merge import take_part

    def keep(keys: np.ndarray) -> np.ndarray:
        return (keys & np.uint64(1)) == 0  # one new shard's half of the ids

    sources = [restored(saved, tmp_path / "a"), restored(saved, None)]
    assert sources[0].stats()["disk_rows"] > 0  # a part must reach the source's disk rows
    merged_tiered = SparseTable(config(tmp_path / "m"))
    merged_ram = SparseTable(config())
    merged_ram.set_policy(eviction={"max_bytes": None})
    merged_tiered.load_parts([take_part(sources[0], keep), take_part(sources[0], keep)])  # each key twice: once kept
    merged_ram.load_parts([take_part(sources[1], keep)])
    kept = IDS[keep(IDS) & sources[1].contains(IDS)]
    assert merged_tiered.size() == merged_ram.size() == kept.shape[0]
    assert merged_tiered.stats()["disk_rows"] > 0
    assert merged_tiered.stats()["rows"] <= merged_tiered.budget.ram_row_limit()
    rows, found = merged_tiered.pull_existing(IDS)
    expected, expected_found = merged_ram.pull_existing(IDS)
    np.testing.assert_array_equal(found, expected_found)
    np.testing.assert_array_equal(rows, expected)
