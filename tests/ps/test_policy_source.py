"""A table's policy reply says where each setting in force came from: the YAML the shard
started with, or a runtime change (and the YAML again once a change puts its value back)."""

from __future__ import annotations

from ps.shard_policy import LASTS, policy_reply
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig, TableConfig

YAML = TableConfig(name="emb", dim=4, admission={"policy": "count", "min_count": 2, "sketch_width": 4096},
                   eviction={"ttl_passes": 3}, show_click_decay=0.9, nonfinite="skip")


def test_every_setting_comes_from_the_yaml_until_a_runtime_change() -> None:
    table = SparseTable(YAML)
    reply = policy_reply(table, {})
    assert reply["source"] == {"admission": "yaml", "eviction": "yaml", "nonfinite": "yaml",
                               "show_click_decay": "yaml"}
    assert (reply["eviction"]["ttl_passes"], reply["show_click_decay"], reply["nonfinite"]) == (3, 0.9, "skip")

    dry = policy_reply(table, {"eviction": {"ttl_passes": 1}, "dry_run": True})
    assert dry["source"]["eviction"] == "runtime" and not dry["applied"]  # what it would be
    assert policy_reply(table, {})["source"]["eviction"] == "yaml"  # a dry run changed nothing

    changed = policy_reply(table, {"eviction": {"ttl_passes": 1}})
    assert changed["applied"] and changed["lasts"] == LASTS
    assert changed["source"] == {"admission": "yaml", "eviction": "runtime", "nonfinite": "yaml",
                                 "show_click_decay": "yaml"}
    assert policy_reply(table, {})["source"]["eviction"] == "runtime"

    back = policy_reply(table, {"eviction": EvictionConfig(ttl_passes=3).model_dump()})
    assert back["source"]["eviction"] == "yaml"
