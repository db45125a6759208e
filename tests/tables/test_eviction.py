"""Eviction through shrink(): TTL, decayed-score threshold, memory budget, and what an
evicted id looks like afterwards."""

from __future__ import annotations

import numpy as np
import pytest

from tables import eviction
from tables.sparse_table import SparseTable
from tables.table_config import (
    CountAdmission,
    EvictionConfig,
    InitializerConfig,
    OptimizerConfig,
    ScoreAdmission,
    TableConfig,
)


def table(eviction: EvictionConfig | None = None, decay: float = 0.5, **kw: object) -> SparseTable:
    return SparseTable(TableConfig(name="t", dim=2, seed=1, show_click_decay=decay,
                                   initializer=InitializerConfig(kind="uniform", scale=0.1),
                                   optimizer=OptimizerConfig(kind="adam", lr=0.01),
                                   eviction=eviction or EvictionConfig(), **kw))


def push(t: SparseTable, keys: list[int], shows: list[float] | None = None, clicks: list[float] | None = None) -> None:
    t.push(keys, np.full((len(keys), t.width), 0.5, np.float32), shows=shows, clicks=clicks)


def test_ttl_evicts_rows_unseen_for_more_than_n_passes() -> None:
    t = table(EvictionConfig(ttl_passes=2))
    push(t, [1, 4])  # pass 0
    assert t.end_pass() == 1
    push(t, [2])
    t.end_pass()
    push(t, [3, 4])  # pass 2: id 4 seen again
    assert t.end_pass() == 3
    # ages at pass 3: id1 3, id2 2, id3 1, id4 1
    assert t.shrink(dry_run=True) == 1
    assert t.size() == 4 and t.contains([1])[0], "dry_run removes nothing"
    assert t.shrink() == 1
    assert t.contains([1, 2, 3, 4]).tolist() == [False, True, True, True]
    assert t.shrink() == 0
    t.end_pass()
    assert t.shrink() == 1
    assert t.contains([1, 2, 3, 4]).tolist() == [False, False, True, True]
    s = t.stats()
    assert (s["evicted"], s["rows"], s["tombstones"]) == (2, 2, 0), "no save chain owes tombstones"


def test_delete_threshold_uses_lazily_decayed_show_and_click() -> None:
    # score = (show - click) * 0.25 + click * 2; decay 0.5 per pass; all values exact in float32.
    ev = {"nonclick_coeff": 0.25, "click_coeff": 2.0}
    t = table(EvictionConfig(delete_threshold=0.5, **ev), decay=0.5)
    push(t, [1, 2, 3], shows=[8, 8, 8], clicks=[0, 2, 0])  # pass 0
    t.end_pass()
    t.end_pass()
    push(t, [3], shows=[1])  # pass 2: id 3 show = 8 * 0.25 + 1 = 3
    t.end_pass()
    # At pass 3: id1 show 1 -> 0.25; id2 show 1 click 0.25 -> 0.6875; id3 show 1.5 -> 0.375.
    for threshold, count in [(0.25, 0), (0.3, 1), (0.375, 1), (0.376, 2), (0.6875, 2), (0.69, 3)]:
        assert t.shrink(policy=EvictionConfig(delete_threshold=threshold, **ev), dry_run=True) == count, threshold
    assert t.size() == 3
    assert t.shrink() == 2
    assert t.contains([1, 2, 3]).tolist() == [False, True, False]
    t.end_pass()  # pass 4: id2 show 0.5 click 0.125 -> 0.34375
    assert t.shrink(policy=EvictionConfig(delete_threshold=0.34375, **ev), dry_run=True) == 0
    assert t.shrink(policy=EvictionConfig(delete_threshold=0.344, **ev), dry_run=True) == 1


def test_no_decay_keeps_counts() -> None:
    t = table(decay=1.0)
    push(t, [1], shows=[4])
    for _ in range(10):
        t.end_pass()
    assert t.shrink(policy=EvictionConfig(delete_threshold=0.4, nonclick_coeff=0.1), dry_run=True) == 0
    assert t.shrink(policy=EvictionConfig(delete_threshold=0.41, nonclick_coeff=0.1), dry_run=True) == 1


def test_memory_budget_by_score() -> None:
    t = table(EvictionConfig(max_rows=3, nonclick_coeff=1.0))
    keys = [50, 10, 40, 20, 30]
    push(t, keys, shows=[5, 1, 4, 2, 3])  # score = show
    assert t.shrink(dry_run=True) == 2
    assert t.shrink() == 2
    assert t.contains(keys).tolist() == [True, False, True, False, True]
    assert t.shrink() == 0, "at the budget: nothing to do"


def test_memory_budget_by_lru() -> None:
    t = table(EvictionConfig(max_rows=2, budget_order="lru"))
    for k in [5, 4, 3, 2]:
        push(t, [k], shows=[100.0 * k])  # the high scores must not matter for lru
        t.end_pass()
    push(t, [5])  # id 5 is the most recently seen now
    assert t.shrink() == 2
    assert t.contains([5, 4, 3, 2]).tolist() == [True, False, False, True]


def test_rules_combine_and_budget_counts_survivors() -> None:
    t = table(EvictionConfig(ttl_passes=0, max_rows=2, nonclick_coeff=1.0))
    push(t, [1], shows=[9])
    t.end_pass()
    push(t, [2, 3, 4], shows=[1, 2, 3])
    # ttl takes id 1; of the three survivors the budget drops the lowest score (id 2).
    assert t.shrink() == 2
    assert t.contains([1, 2, 3, 4]).tolist() == [False, False, True, True]


@pytest.mark.parametrize("admission", [
    CountAdmission(min_count=2, sketch_width=4096),
    # Each push (show 1, click 1) scores 0.5: admitted on the second.
    ScoreAdmission(threshold=1.0, nonclick_coeff=0.5, click_coeff=0.5, sketch_width=4096),
], ids=["count", "score"])
def test_evicted_id_behaves_like_a_never_seen_id(admission: object) -> None:
    never = table(admission=admission)
    t = table(EvictionConfig(ttl_passes=0), admission=admission)
    keys = [7, 2**64 - 1, 0]
    ones = [1.0] * len(keys)
    for _ in range(3):
        push(t, keys, shows=ones, clicks=ones)
    assert t.contains(keys).all()
    assert not np.array_equal(t.pull(keys), never.pull(keys))
    t.end_pass()
    assert t.shrink() == 3
    assert not t.contains(keys).any() and t.size() == 0
    np.testing.assert_array_equal(t.pull(keys), never.pull(keys))
    # Re-admission needs the threshold again, exactly like for the never-seen table.
    for t_ in (t, never):
        push(t_, keys, shows=ones, clicks=ones)
    assert not t.contains(keys).any(), "an evicted id must earn its row again"
    for t_ in (t, never):
        push(t_, keys, shows=ones, clicks=ones)
    assert t.contains(keys).all()
    np.testing.assert_array_equal(t.pull(keys), never.pull(keys))  # re-created bit-identically


def test_evicted_id_with_always_admission_is_recreated_from_its_initializer() -> None:
    never = table()
    t = table(EvictionConfig(ttl_passes=0))
    push(t, [3, 4])
    push(t, [3])
    t.end_pass()
    assert t.shrink() == 2
    assert t.stats()["rejected_pulls"] == 0
    np.testing.assert_array_equal(t.pull([3, 4]), never.pull([3, 4]))
    assert t.stats()["rejected_pulls"] == 2
    push(t, [4])
    push(never, [4])
    np.testing.assert_array_equal(t.pull([3, 4]), never.pull([3, 4]))


@pytest.mark.parametrize("dry_run", [True, False])
def test_shrink_with_policy_overrides_config(dry_run: bool) -> None:
    t = table(EvictionConfig())  # no rules configured: shrink() does nothing
    push(t, [1, 2, 3], shows=[1, 5, 9])
    assert t.shrink() == 0
    got = t.shrink(policy=EvictionConfig(max_rows=1, nonclick_coeff=1.0), dry_run=dry_run)
    assert got == 2
    assert t.size() == (3 if dry_run else 1)
    assert t.contains([3])[0]


@pytest.mark.parametrize("decay", [0.98, 0.5, 1.0, 0.999])
@pytest.mark.parametrize("spread", [1, 40, eviction.MAX_AGES + 5])
def test_scores_kernel_gives_numpys_float32_scores_bit_for_bit(decay: float, spread: int) -> None:
    """The byte budget's scores (one kernel over a table of decay factors per age) equal the
    numpy reference exactly, ages in the future and past the table's width included."""
    rng = np.random.default_rng(spread)
    n = 5000
    cfg = EvictionConfig(nonclick_coeff=0.1, click_coeff=1.0)
    show = (rng.random(n) * 100).astype(np.float32)
    click = (show * rng.random(n)).astype(np.float32)
    last_seen = rng.integers(-3, spread + 2, n).astype(np.int32)  # up to two passes ahead (a restored clock)
    got = eviction.scores(cfg, show=show, click=click, last_seen=last_seen, current_pass=spread, decay=decay)
    want = eviction.score(eviction.decayed(show, last_seen, spread, decay),
                          eviction.decayed(click, last_seen, spread, decay), cfg.nonclick_coeff, cfg.click_coeff)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
