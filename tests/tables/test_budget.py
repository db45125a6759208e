"""The byte budget: enforced as rows are created, refuse or evict,
measured bytes never over it, kept by save/load, bad values refused with their key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import ConfigError
from core.yaml_config import validate_config
from tables.budget import rows_within, share_shard_budget
from tables.initializers import initial_rows
from tables.sparse_table import SparseTable
from tables.table_config import CountAdmission, EvictionConfig, InitializerConfig, OptimizerConfig, TableConfig


def table(max_bytes: int | None, over: str = "evict", order: str = "score", **kw: object) -> SparseTable:
    return SparseTable(TableConfig(name="t", dim=4, seed=9, initializer=InitializerConfig(kind="uniform", scale=0.1),
                                   optimizer=OptimizerConfig(kind="adagrad", lr=0.1),
                                   eviction=EvictionConfig(max_bytes=max_bytes, over_budget=over, budget_order=order),
                                   **kw))


def measured(t: SparseTable) -> int:
    """Every array the table holds, counted here apart from tables.budget."""
    st = t.state
    arrays = [*st.rows.cols.values(), st.slots, st.hash_key, st.tomb_keys, st.tomb_epochs,
              *(a for a in st.admission.state().values() if a.ndim == 2)]  # sketches; counters are not budgeted
    return sum(a.nbytes for a in arrays)


def push(t: SparseTable, keys: np.ndarray, shows: float = 1.0) -> None:
    t.push(keys, np.full((keys.shape[0], t.width), 0.01, np.float32), shows=np.full(keys.shape[0], shows, np.float32))


def init_rows(keys: np.ndarray) -> np.ndarray:
    return initial_rows(keys, 4, seed=9, kind="uniform", scale=0.1)


@pytest.mark.parametrize("over", ["refuse", "evict"])
@pytest.mark.parametrize("admission", [None, CountAdmission(min_count=1, sketch_width=4096, sketch_depth=2)])
def test_a_stream_of_new_ids_never_exceeds_the_budget(over: str, admission: object) -> None:
    budget = 200_000
    kw = {"admission": admission} if admission is not None else {}
    t = table(budget, over, **kw)
    rng = np.random.default_rng(1)
    for step in range(60):
        push(t, rng.integers(0, 2**64, 300, dtype=np.uint64))
        assert measured(t) <= budget, f"step {step}"
        assert t.stats()["bytes"] == measured(t)
    s = t.stats()
    limit = rows_within(budget, t.state.rows.row_nbytes(), t.state.admission.memory_bytes() + 16)
    assert s["max_bytes"] == budget and s["over_budget"] == over
    assert s["rows"] >= 0.9 * limit, "the budget is used, not wasted"
    assert s["refused_by_budget"] > 0 if over == "refuse" else s["evicted_by_budget"] > 0
    assert s["rows"] + s["refused_by_budget"] + s["evicted_by_budget"] == 60 * 300


def test_refuse_keeps_old_rows_and_counts_refusals() -> None:
    t = table(60_000, "refuse")
    old = np.arange(1, 100_000, dtype=np.uint64)
    for a in range(0, old.shape[0], 1000):
        push(t, old[a : a + 1000])
    kept = old[t.contains(old)]
    assert 0 < kept.shape[0] < old.shape[0]
    refused = t.stats()["refused_by_budget"]
    assert refused == old.shape[0] - kept.shape[0]
    before = t.pull(kept)
    new = np.arange(10**9, 10**9 + 500, dtype=np.uint64)
    push(t, new)
    assert t.stats()["refused_by_budget"] == refused + 500
    assert not t.contains(new).any()
    np.testing.assert_array_equal(t.pull(new), init_rows(new), "refused ids read their initializer row")
    np.testing.assert_array_equal(t.pull(kept), before, "old rows unchanged")
    push(t, kept[:10])  # known ids still train
    assert not np.array_equal(t.pull(kept[:10]), before[:10])


@pytest.mark.parametrize("order", ["score", "lru"])
def test_evict_removes_the_coldest_and_they_read_their_initializer(order: str) -> None:
    t = table(30_000, "evict", order)
    limit = rows_within(30_000, t.state.rows.row_nbytes(), 16)
    hot = np.arange(1, limit // 2, dtype=np.uint64)
    cold = np.arange(10**6, 10**6 + limit // 2 - 1, dtype=np.uint64)
    push(t, cold, shows=0.0)  # pass 0, score 0
    t.end_pass()
    push(t, hot, shows=5.0)  # pass 1, score 0.5
    assert t.stats()["evicted_by_budget"] == 0 and t.size() == hot.shape[0] + cold.shape[0]
    trained = t.pull(hot)
    new = np.arange(2 * 10**6, 2 * 10**6 + 50, dtype=np.uint64)
    push(t, new, shows=1.0)
    s = t.stats()
    assert s["evicted_by_budget"] > 0 and s["refused_by_budget"] == 0
    assert t.contains(new).all() and t.contains(hot).all(), "the hot rows and the new ids stay"
    gone = cold[~t.contains(cold)]
    assert gone.shape[0] == s["evicted_by_budget"]
    np.testing.assert_array_equal(t.pull(gone), init_rows(gone))
    np.testing.assert_array_equal(t.pull(hot), trained)
    assert s["tombstones"] == 0, "no save chain owes tombstones"
    assert measured(t) <= 30_000


def test_budget_evictions_leave_tombstones_for_the_next_delta(tmp_path: Path) -> None:
    t = table(30_000, "evict")
    push(t, np.arange(1, 200, dtype=np.uint64))
    t.save(tmp_path / "base")
    push(t, np.arange(10**6, 10**6 + 400, dtype=np.uint64))
    evicted = t.stats()["evicted_by_budget"]
    assert evicted > 0 and t.stats()["tombstones"] == evicted
    t.save(tmp_path / "d1", mode="delta")
    u = table(30_000, "evict")
    u.load(tmp_path / "base")
    u.load(tmp_path / "d1")
    keys = np.concatenate([np.arange(1, 200, dtype=np.uint64), np.arange(10**6, 10**6 + 400, dtype=np.uint64)])
    np.testing.assert_array_equal(u.contains(keys), t.contains(keys))
    np.testing.assert_array_equal(u.pull(keys), t.pull(keys))


def test_a_flood_between_saves_is_bounded_by_the_tombstone_share(tmp_path: Path) -> None:
    """Evictions after a save leave tombstones (counted in the budget); once they hold a
    quarter of it, new ids are refused instead of evicting more, until the next save."""
    budget = 60_000
    t = table(budget, "evict")
    push(t, np.arange(1, 300, dtype=np.uint64))
    t.save(tmp_path / "base")
    rng = np.random.default_rng(4)
    for step in range(80):
        push(t, rng.integers(0, 2**64, 200, dtype=np.uint64))
        assert measured(t) <= budget, f"step {step}"
    s = t.stats()
    assert s["evicted_by_budget"] > 0 and s["refused_by_budget"] > 0
    assert s["tombstones"] * 12 < budget // 4 + 12 * 2000
    assert s["rows"] > 0.5 * rows_within(budget, t.state.rows.row_nbytes(), 16), "the table did not empty itself"
    t.save(tmp_path / "d1", mode="delta")  # prunes the tombstones: evicting resumes
    refused = s["refused_by_budget"]
    push(t, rng.integers(0, 2**64, 200, dtype=np.uint64))
    assert t.stats()["tombstones"] <= 200 + 4000 and t.stats()["refused_by_budget"] == refused
    assert measured(t) <= budget


def test_save_and_load_keep_the_budget_settings(tmp_path: Path) -> None:
    t = table(None)
    t.set_policy(eviction={"max_bytes": 40_000, "over_budget": "refuse", "budget_order": "lru"})
    push(t, np.arange(1, 5000, dtype=np.uint64))
    t.save(tmp_path / "s")
    u = table(None)
    u.load(tmp_path / "s")
    ev = u.config.eviction
    assert (ev.max_bytes, ev.over_budget, ev.budget_order) == (40_000, "refuse", "lru")
    assert u.stats()["refused_by_budget"] == t.stats()["refused_by_budget"] > 0
    push(u, np.arange(10**9, 10**9 + 100, dtype=np.uint64))
    assert measured(u) <= 40_000 and u.size() == t.size()


def test_a_lowered_budget_gives_memory_back_on_the_next_push() -> None:
    t = table(None)
    push(t, np.arange(1, 3000, dtype=np.uint64))
    t.set_policy(eviction={"max_bytes": 50_000, "over_budget": "evict"})
    push(t, np.arange(10**6, 10**6 + 10, dtype=np.uint64))
    assert measured(t) <= 50_000 and t.contains(np.arange(10**6, 10**6 + 10, dtype=np.uint64)).all()


def test_bad_budget_values_name_their_key() -> None:
    base = {"name": "t", "dim": 4}
    for bad, key in (({"max_bytes": 0}, "eviction.max_bytes"), ({"max_bytes": "lots"}, "eviction.max_bytes"),
                     ({"over_budget": "drop"}, "eviction.over_budget")):
        with pytest.raises(ConfigError) as err:
            validate_config({**base, "eviction": bad}, TableConfig, "ps.yaml")
        assert key in str(err.value) and err.value.detail["keys"] == [key]
    with pytest.raises(ConfigError, match=r"eviction\.max_bytes = 100 bytes cannot hold one row"):
        table(100)
    with pytest.raises(ConfigError, match=r"eviction\.max_bytes"):  # sketches alone are over it
        table(50_000, admission=CountAdmission(sketch_width=1 << 16, sketch_depth=4))
    t = table(None)
    with pytest.raises(ConfigError, match=r"eviction\.max_bytes"):
        t.set_policy(eviction={"max_bytes": 10})
    assert t.config.eviction.max_bytes is None, "a refused policy changes nothing"


def test_shard_budget_is_split_over_its_tables_and_checked() -> None:
    wide = SparseTable(TableConfig(name="w", dim=32, optimizer=OptimizerConfig(kind="adam")))
    thin = SparseTable(TableConfig(name="n", dim=2))
    share_shard_budget([wide, thin], 400_000)
    sw, sn = wide.stats()["max_bytes"], thin.stats()["max_bytes"]
    assert sw + sn <= 400_000 and sw > 4 * sn
    rng = np.random.default_rng(3)
    for _ in range(20):
        for t in (wide, thin):
            push_any = rng.integers(0, 2**64, 500, dtype=np.uint64)
            t.push(push_any, np.zeros((500, t.width), np.float32))
    assert measured(wide) + measured(thin) <= 400_000
    assert abs(wide.size() - thin.size()) < 0.2 * thin.size(), "about the same rows each"
    own = SparseTable(TableConfig(name="o", dim=2, eviction=EvictionConfig(max_bytes=20_000)))
    share_shard_budget([own], 10**9)
    assert own.stats()["max_bytes"] == 20_000, "the table's own, smaller budget applies"
    with pytest.raises(ConfigError, match=r"shard\.max_bytes"):
        share_shard_budget([SparseTable(TableConfig(name="x", dim=2))], 150)


def test_evict_mode_refuses_while_a_save_reads_the_rows(tmp_path: Path) -> None:
    t = table(30_000, "evict")
    limit = rows_within(30_000, t.state.rows.row_nbytes(), 16)
    push(t, np.arange(1, limit + 1, dtype=np.uint64))
    save = t.begin_save(tmp_path / "s")
    new = np.arange(10**6, 10**6 + 20, dtype=np.uint64)
    push(t, new)  # rows must not move under the open snapshot
    s = t.stats()
    assert (s["refused_by_budget"], s["evicted_by_budget"]) == (20, 0)
    save.write()
    push(t, new)
    assert t.contains(new).all() and t.stats()["evicted_by_budget"] > 0
    assert measured(t) <= 30_000


def test_a_load_fits_the_budget_at_once(tmp_path: Path) -> None:
    saved = table(None)
    push(saved, np.arange(1, 100, dtype=np.uint64))
    saved.save(tmp_path / "s")
    t = table(None)
    t.set_shard_budget(20_000)
    t.load(tmp_path / "s")  # a loaded base is allocated at initial_capacity (1024 rows), over 20 KB
    assert measured(t) <= 20_000 and t.size() == 99
    np.testing.assert_array_equal(t.pull(np.arange(1, 100, dtype=np.uint64)),
                                  saved.pull(np.arange(1, 100, dtype=np.uint64)))
