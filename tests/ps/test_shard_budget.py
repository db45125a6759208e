"""A shard's byte budget (PS config ``shard.max_bytes``): split over its tables, enforced on
push, visible in the STATS reply; bad values name their key."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import ConfigError
from core.yaml_config import validate_config
from ps.ps_config import PSConfig
from ps.shard_server import ShardServer


def test_shard_budget_reaches_the_tables_and_their_stats() -> None:
    cfg = validate_config({"tables": [{"name": "emb", "dim": 8}, {"name": "wide", "dim": 2, "wide": True,
                                                                  "eviction": {"over_budget": "refuse"}}],
                           "shard": {"max_bytes": 300_000}}, PSConfig, "ps.yaml")
    srv = ShardServer(cfg, index=0, endpoint="tcp://127.0.0.1:0")
    rng = np.random.default_rng(0)
    for _ in range(30):
        for t in srv.sparse.values():
            keys = rng.integers(0, 2**64, 400, dtype=np.uint64)
            t.push(keys, np.zeros((400, t.width), np.float32))
    stats = srv.stats()["tables"]
    assert sum(s["bytes"] for s in stats.values()) <= 300_000
    assert sum(s["max_bytes"] for s in stats.values()) <= 300_000
    assert stats["emb"]["evicted_by_budget"] > 0 and stats["emb"]["over_budget"] == "evict"
    assert stats["wide"]["refused_by_budget"] > 0 and stats["wide"]["over_budget"] == "refuse"


@pytest.mark.parametrize(("shard", "match"), [({"max_bytes": 0}, "shard.max_bytes"),
                                              ({"max_byte": 10}, "shard.max_byte")])
def test_bad_shard_budget_names_its_key(shard: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match.replace(".", r"\.")):
        validate_config({"tables": [{"name": "emb", "dim": 8}], "shard": shard}, PSConfig, "ps.yaml")


def test_a_shard_budget_too_small_for_its_tables_is_refused() -> None:
    cfg = PSConfig.model_validate({"tables": [{"name": "emb", "dim": 8}], "shard": {"max_bytes": 100}})
    with pytest.raises(ConfigError, match=r"shard\.max_bytes"):
        ShardServer(cfg, index=0, endpoint="tcp://127.0.0.1:0")
