"""The byte budget's evictions against a slow per-key reference: random pushes mixing known
and new ids under budgets that force several eviction rounds per push (tombstones lower the
limit after each), budgets lowered below the table's size and raised again, saves that prune
the tombstones. The table must keep exactly the rows the eviction score says, never evict an
id its own push updates, and keep every kept row's trained values."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tables.budget import EVICT_SLACK, TOMBSTONE_BYTES, TOMBSTONE_SHARE, reserved_fixed_bytes, rows_within
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig, InitializerConfig, OptimizerConfig, TableConfig

from .reference_table import ReferenceTable

HASH_KEY_BYTES = 16
ROUNDS = 4  # eviction rounds a push may run (tables.byte_budget)


def config(max_bytes: int) -> TableConfig:
    # score = show exactly (coefficients 1, no decay), so no two rows tie at the eviction boundary
    return TableConfig(name="t", dim=4, seed=5, initializer=InitializerConfig(kind="uniform", scale=0.1),
                       optimizer=OptimizerConfig(kind="sgd", lr=0.5), show_click_decay=1.0,
                       eviction=EvictionConfig(max_bytes=max_bytes, over_budget="evict", budget_order="score",
                                               nonclick_coeff=1.0, click_coeff=1.0))


class BudgetReference:
    """Rows by id in dicts: which ids a budget keeps, evicts and refuses, one id at a time."""

    def __init__(self, cfg: TableConfig, row_bytes: int) -> None:
        self.values = ReferenceTable(cfg)
        self.show: dict[int, np.float32] = {}
        self.budget = cfg.eviction.max_bytes
        self.row_bytes = row_bytes
        self.tombstones = 0
        self.chain = False  # a save chain exists: evicted ids are kept as tombstones
        self.evicted = self.refused = self.multi_round_pushes = 0

    def limit(self) -> int:
        tombs = self.tombstones * TOMBSTONE_BYTES
        step = max(1, self.budget // EVICT_SLACK)
        return rows_within(self.budget, self.row_bytes, HASH_KEY_BYTES + -(-tombs // step) * step)

    def push(self, keys: list[int], grads: np.ndarray, shows: np.ndarray) -> None:
        pushed = set(keys)
        new = [k for k in keys if k not in self.show]
        m, limit = len(new), self.limit()
        if len(self.show) + m > limit and self.tombstones * TOMBSTONE_BYTES < self.budget // TOMBSTONE_SHARE:
            want = len(self.show) + m - limit + limit // EVICT_SLACK
            for round_ in range(ROUNDS):
                others = [k for k in self.show if k not in pushed]
                victims = sorted(others, key=lambda k: self.show[k])[: max(0, want)]
                if not victims:
                    break
                self.multi_round_pushes += round_ == 1
                for k in victims:
                    del self.show[k]
                    del self.values.rows[k]
                self.evicted += len(victims)
                self.tombstones += len(victims) if self.chain else 0
                limit = self.limit()
                want = len(self.show) + m - limit
                if want <= 0:
                    break
        take = max(0, min(m, limit - len(self.show)))
        refused = set(new[take:])
        self.refused += len(refused)
        kept = [i for i, k in enumerate(keys) if k not in refused]
        for i in kept:
            self.show[keys[i]] = self.show.get(keys[i], np.float32(0.0)) + shows[i]
        self.values.push(np.array([keys[i] for i in kept], np.uint64), grads[kept].astype(np.float64))

    def saved(self) -> None:
        self.chain, self.tombstones = True, 0


def test_evictions_keep_the_rows_a_slow_reference_keeps(tmp_path: Path) -> None:
    start_budget = 60_000
    t = SparseTable(config(start_budget))
    ref = BudgetReference(t.config, t.state.rows.row_nbytes())
    rng = np.random.default_rng(7)
    pool = np.unique(rng.integers(1, 2**63, 6000, dtype=np.uint64))  # ids a push draws from
    saves = 0
    for step in range(160):
        if step % 40 == 20:  # lowered below what the table holds now, then raised again
            ref.budget = max(8_000, t.stats()["bytes"] // 3) if step % 80 == 20 else start_budget
            t.set_policy(eviction={"max_bytes": ref.budget})
        known = np.array(sorted(ref.show), np.uint64)
        old = rng.choice(known, min(known.shape[0], 60), replace=False) if known.shape[0] else known
        fresh = rng.choice(pool, 240, replace=False)
        keys = np.unique(np.concatenate([old, fresh]))  # distinct ids: one show sum each, exact in float32
        rng.shuffle(keys)
        grads = rng.normal(0.0, 0.1, (keys.shape[0], t.width)).astype(np.float32)
        shows = (1.0 + rng.random(keys.shape[0])).astype(np.float32)
        t.push(keys, grads, shows=shows)
        ref.push(keys.tolist(), grads, shows)

        stored = np.array(sorted(ref.show), np.uint64)
        s = t.stats()
        assert t.size() == len(ref.show) and t.contains(stored).all(), f"step {step}: the rows the score keeps"
        assert (s["evicted_by_budget"], s["refused_by_budget"]) == (ref.evicted, ref.refused), f"step {step}"
        assert s["tombstones"] == ref.tombstones, f"step {step}"
        np.testing.assert_allclose(t.pull(stored), ref.values.pull(stored), rtol=1e-5, atol=1e-6,
                                   err_msg=f"step {step}: a kept row holds its own values")
        assert t.contains(keys[[k in ref.show for k in keys.tolist()]]).all(), "a pushed known id stays"
        if len(ref.show) <= ref.limit():
            assert s["bytes"] <= ref.budget, f"step {step}: the budget holds"
        if step % 25 == 24:
            t.save(tmp_path / f"s{saves}", mode="base" if saves == 0 else "delta")
            saves += 1
            ref.saved()
    assert ref.multi_round_pushes > 5, "pushes that evicted in several rounds were exercised"
    assert ref.evicted > 1000 and ref.refused > 0


def test_a_budget_lowered_below_the_table_holds_on_the_next_push(tmp_path: Path) -> None:
    """With a save chain (tombstones kept), a push that mixes known ids with new ones right
    after the budget went below the table's size evicts in rounds and keeps its known ids."""
    t = SparseTable(config(10**9))
    keys = np.arange(1, 20_001, dtype=np.uint64)
    t.push(keys, np.zeros((keys.shape[0], t.width), np.float32), shows=np.linspace(1, 2, 20_000, dtype=np.float32))
    t.save(tmp_path / "base")
    budget = t.stats()["bytes"] // 3
    t.set_policy(eviction={"max_bytes": budget})
    hot = keys[-500:]  # the last rows of the store: the ones an eviction moves into its holes
    new = np.arange(10**9, 10**9 + 2000, dtype=np.uint64)
    pushed = np.concatenate([hot, new])
    t.push(pushed, np.ones((pushed.shape[0], t.width), np.float32))
    s = t.stats()
    assert s["bytes"] <= budget and s["evicted_by_budget"] > 0
    assert t.contains(hot).all(), "ids the push updates are never its victims"
    gone = s["evicted_by_budget"]  # the lowest shows: the first ids
    assert not t.contains(keys[:gone]).any() and t.contains(keys[gone:]).all()
    assert rows_within(budget, t.state.rows.row_nbytes(), reserved_fixed_bytes(t.state, budget)) >= t.size()
