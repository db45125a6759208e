"""Sampled staleness: each push of a followed key counts the updates since its worker's oldest
open pull of it; what a shard holds stays bounded (keys untouched for a while are forgotten, open
pulls per worker and key are capped); the shards follow nothing unless the PS config asks, and
report what they followed in their stats when it does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ps.shard_tables import ShardTables
from ps.staleness import MAX_OPEN, StalenessSample, summarize
from tables.table_config import TableConfig

from .ps_harness import shard_processes


def keys(*values: int) -> np.ndarray:
    return np.array(values, np.uint64)


def test_a_push_counts_the_updates_since_its_workers_oldest_open_pull() -> None:
    s = StalenessSample(1)
    s.pulled("0", "t", keys(5, 6))
    s.pulled("0", "t", keys(5))  # worker 0's prefetch pulls key 5 again for its next batch
    s.pulled("1", "t", keys(5))
    s.pushed("1", "t", keys(5))  # nothing applied to 5 since worker 1's pull: 0
    s.pushed("0", "t", keys(5, 6))  # 5: worker 1's push since worker 0's first pull: 1; 6: 0
    s.pushed("0", "t", keys(5))  # 5: two pushes since worker 0's second pull
    s.pushed("2", "t", keys(5))  # no open pull of worker 2: unpaired, still an update
    assert s.counts[:3].tolist() == [2, 1, 1]
    assert summarize([s.state()]) == {"pushes": 4, "unpaired": 1, "p50": 0, "p99": 2, "max": 2, "mean": 0.75}


def test_only_one_in_every_keys_is_followed_and_shard_states_add_up() -> None:
    a, b = StalenessSample(4), StalenessSample(4)
    for s in (a, b):
        s.pulled("0", "t", keys(1, 4, 8))
        s.pushed("9", "t", keys(1, 4, 8))  # another worker's update of 4 and 8 (1 is not followed)
        s.pushed("0", "t", keys(1, 4, 8))
    assert a.state() == {"counts": {1: 2}, "unpaired": 2}
    states = [{"counts": {str(k): v for k, v in a.state()["counts"].items()}, "unpaired": 2}, b.state()]  # JSON keys
    assert summarize(states)["pushes"] == 4 and summarize(states)["p50"] == 1
    assert summarize([])["p50"] is None


def test_keys_untouched_for_a_while_are_forgotten_so_the_held_keys_stay_bounded() -> None:
    s = StalenessSample(1, forget_after=10)
    s.pulled("0", "t", keys(7))
    for key in range(100, 1100):
        s.pulled("1", "t", keys(key))  # a thousand keys, each touched once
        if key % 5 == 0:
            s.pushed("2", "t", keys(7))  # key 7 is touched all along
        assert s.followed <= 20
    s.pushed("1", "t", keys(100))  # forgotten with its open pull: unpaired
    s.pushed("0", "t", keys(7))  # still followed: worker 2's 200 updates since worker 0's pull
    assert s.state() == {"counts": {200: 1}, "unpaired": 200 + 1}


def test_a_worker_that_pulls_and_never_pushes_holds_a_bounded_number_of_open_pulls() -> None:
    s = StalenessSample(1)
    for _ in range(3 * MAX_OPEN):
        s.pulled("0", "t", keys(3))
    for _ in range(3 * MAX_OPEN):
        s.pushed("0", "t", keys(3))
    assert s.unpaired == 2 * MAX_OPEN and int(s.counts.sum()) == MAX_OPEN


def test_a_shard_follows_nothing_by_default() -> None:
    assert ShardTables([TableConfig(name="t", dim=2)], index=0).staleness is None


@pytest.mark.process
def test_shards_report_the_staleness_of_tagged_workers(tmp_path: Path) -> None:
    with (shard_processes(tmp_path, [{"name": "t", "dim": 2}], n=2, shard={"staleness_sample": 1}) as shards,
          shards.client() as w0, shards.client() as w1):
        w0.set_tag("0")
        w1.set_tag("1")
        k = np.arange(1, 41, dtype=np.uint64)
        grads = np.ones((40, 2), np.float32)
        w0.wait(w0.pull("t", k))
        w1.wait(w1.pull("t", k, unique=True))  # the direct path of a batch's unique keys
        w1.wait(w1.push("t", k, grads))
        w0.wait(w0.push("t", k, grads, unique=True))
        states = [s["staleness"] for s in w0.admin.stats()]
    assert summarize(states) == {"pushes": 80, "unpaired": 0, "p50": 0, "p99": 1, "max": 1, "mean": 0.5}
