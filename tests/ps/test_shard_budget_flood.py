"""A table's byte budget lowered at runtime below what real shard processes hold, then a flood
of new ids: every push is answered, each shard holds its budget, and the rows kept are the
ones the eviction score keeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ps.admin import SaveMode
from ps.routing import shard_of

from .ps_harness import shard_processes

pytestmark = pytest.mark.process

# score = show (coefficients 1, no decay): old ids score 10..20 by key, flood ids 1 a push
EVICTION = {"over_budget": "evict", "budget_order": "score", "nonclick_coeff": 1.0, "click_coeff": 1.0}
EMB = {"name": "emb", "dim": 8, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"},
       "show_click_decay": 1.0, "eviction": EVICTION}


def test_a_lowered_budget_holds_under_a_flood_of_new_ids(tmp_path: Path) -> None:
    old = np.arange(1, 20_001, dtype=np.uint64)
    hot = old[-1000:]  # pushed again with every flood push: never a victim of it
    rng = np.random.default_rng(3)
    with shard_processes(tmp_path, [EMB], n=2) as shards, shards.client() as c:
        shows = np.linspace(10.0, 20.0, old.shape[0], dtype=np.float32)
        c.wait(c.push("emb", old, np.zeros((old.shape[0], 8), np.float32), shows=shows,
                      clicks=np.zeros_like(shows)))
        c.admin.save()  # a save chain: evicted ids are kept as tombstones, which lower the row limit
        budget = min(s["tables"]["emb"]["bytes"] for s in c.admin.stats()) // 3
        applied = c.admin.apply_policy("emb", eviction={**EVICTION, "max_bytes": budget})
        assert all(p["applied"] and p["eviction"]["max_bytes"] == budget for p in applied)
        for step in range(24):
            if step == 12:
                c.admin.save(mode=SaveMode.DELTA)  # prunes the tombstones: evicting goes on
            fresh = rng.integers(1 << 40, 1 << 62, 3000, dtype=np.uint64)
            keys = np.concatenate([hot, fresh])
            c.wait(c.push("emb", keys, np.ones((keys.shape[0], 8), np.float32)))
        stats = [s["tables"]["emb"] for s in c.admin.stats()]
        errors = [s["errors"] for s in c.admin.stats()]
        found = c.wait(c.pull_existing("emb", old)).found
    assert errors == [{}, {}], "no push was refused with an error"
    for s in stats:
        assert s["max_bytes"] == budget and s["bytes"] <= budget, "each shard holds the budget"
        assert s["evicted_by_budget"] > 0
    assert found[-1000:].all(), "ids every push updates stay"
    owner = shard_of(old, 2)
    for shard in range(2):
        mine = found[:-1000][owner[:-1000] == shard]
        kept = int(mine.sum())
        assert 0 < kept < mine.shape[0]
        # old ids score by key: a shard keeps its highest-scoring ones, evicts the rest (flood ids, score 1, first)
        assert mine[-kept:].all() and not mine[:-kept].any(), f"shard {shard} kept the rows its score keeps"
