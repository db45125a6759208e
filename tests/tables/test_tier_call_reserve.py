"""A tiered table's RAM budget holds its calls' temporaries beside its rows
(:meth:`tables.byte_budget.TableBudget.note_call`): a large pull or push lowers the RAM tier's
row limit by what the call holds, at most a quarter of the budget, and the reserve shrinks
again over later small calls; a table without a tier keeps its row limit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables.budget import EVICT_SLACK
from tables.byte_budget import CALL_BYTES_PER_KEY, CALL_DECAY, MAX_CALL_SHARE
from tables.sparse_table import SparseTable
from tables.table_config import DiskTierConfig, EvictionConfig, OptimizerConfig, TableConfig, TierConfig

DIM = 8
BUDGET = 2_000_000
CALL_KEY_BYTES = DIM * 4 + CALL_BYTES_PER_KEY  # a pulled row and the call's keys, row numbers, masks


def table(tmp_path: Path | None) -> SparseTable:
    tier = TierConfig(disk=DiskTierConfig(path=str(tmp_path))) if tmp_path is not None else None
    return SparseTable(TableConfig(name="t", dim=DIM, optimizer=OptimizerConfig(kind="adagrad", lr=0.1),
                                   eviction=EvictionConfig(max_bytes=BUDGET), tier=tier))


def fill(t: SparseTable, n: int) -> np.ndarray:
    keys = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for s in range(0, n, 4096):
        t.push(keys[s : s + 4096], np.full((min(4096, n - s), DIM), 0.01, np.float32))
    return keys


def reserved(call_keys: float) -> int:
    return min(BUDGET // MAX_CALL_SHARE, int(call_keys * CALL_KEY_BYTES))


def ram_bytes(t: SparseTable) -> int:
    return t.state.rows.n * t.state.rows.row_nbytes()


def test_a_large_pull_makes_the_ram_tier_give_way_to_what_it_holds(tmp_path: Path) -> None:
    t = table(tmp_path)
    keys = fill(t, 40_000)  # well past the budget: rows on disk
    assert t.tier is not None and t.tier.disk.rows > 0
    before, held = t.budget.ram_row_limit(), reserved(t.budget.call_keys)  # the fill's pushes hold some
    big = 20_000  # 1.6 MB of temporaries would not fit beside rows filling the budget
    t.pull(keys[-big:])  # mostly disk rows read in place; its reserve lowers the limit
    after = t.budget.ram_row_limit()
    step = BUDGET // EVICT_SLACK
    reserve = reserved(big)
    row_bytes = t.state.rows.row_nbytes()
    assert (before - after) * row_bytes >= reserve - held - step - row_bytes
    assert (before - after) * row_bytes <= reserve - held + step + row_bytes
    # promotions and new ids' rows stay within the lowered limit: RAM demotes its coldest rows for them
    t.pull(keys[:2000])
    t.pull(keys[:2000])  # a second read promotes
    t.push(np.arange(10**12, 10**12 + 500, dtype=np.uint64), np.full((500, DIM), 0.01, np.float32))
    assert t.state.rows.n <= t.budget.ram_row_limit()
    assert ram_bytes(t) + reserve <= BUDGET
    assert t.size() == 40_500  # nothing was lost: rows moved to disk, none evicted


def test_the_reserve_is_at_most_a_quarter_of_the_budget(tmp_path: Path) -> None:
    t = table(tmp_path)
    keys = fill(t, 40_000)
    base = t.budget.ram_row_limit()
    t.pull(np.resize(keys, 200_000))  # its temporaries alone would be 16 MB, eight budgets
    capped = t.budget.ram_row_limit()
    row_bytes = t.state.rows.row_nbytes()
    assert (base - capped) * row_bytes <= BUDGET // MAX_CALL_SHARE + BUDGET // EVICT_SLACK + row_bytes
    assert capped > 0


def test_small_calls_leave_the_reserve_and_larger_ones_shrink_it_by_their_volume(tmp_path: Path) -> None:
    t = table(tmp_path)
    keys = fill(t, 40_000)
    t.pull(keys[:10_000])
    after_big = t.budget.ram_row_limit()
    for _ in range(1000):  # online lookups between training's large calls
        t.pull(keys[:100])
    assert t.budget.ram_row_limit() == after_big
    held = t.budget.call_keys
    calls = 0
    while t.budget.ram_row_limit() == after_big and calls < 2000:
        t.pull(keys[:4096])
        calls += 1
        held *= CALL_DECAY ** (4096 / held)  # the rule, one call at a time
        assert t.budget.call_keys == pytest.approx(held, rel=1e-9)
    assert 20 < calls < 2000  # not after a few calls: the RAM tier does not churn with the call sizes
    assert t.budget.ram_row_limit() > after_big  # the rows got room back


def test_a_table_without_a_tier_keeps_its_row_limit_through_a_large_pull() -> None:
    t = table(None)
    keys = fill(t, 40_000)  # the budget evicts the coldest rows
    before = t.budget.ram_row_limit()
    t.pull(np.resize(keys, 100_000))
    assert t.budget.ram_row_limit() == before
