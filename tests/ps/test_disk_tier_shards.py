"""A table with a disk tier on real shard processes: rows over the RAM budget live on disk, a
base and a delta save hold both tiers, a shard killed with SIGKILL comes back from them with
nothing lost that they held; on a full disk (a real tmpfs: as root, or as root of a user namespace
for any other user) demotions are refused and counted on /metrics while the RAM tier keeps serving."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from core.errors import ShardRestarted
from ps.admin import SaveMode
from ps.client import PSClient
from ps.ps_config import ClientConfig
from tests.prom_scrape import labels, samples, scrape, shard_with_metrics
from tests.trainer.small_disk import can_mount, rerun_as_namespace_root, small_disk

from .ps_harness import shard_processes

pytestmark = pytest.mark.process

KEYS = np.arange(1, 6001, dtype=np.uint64)
RAM_BYTES = 400_000  # RAM rows of dim 16 with SGD beside the disk rows' keys and index: about a third of KEYS


def tiered(path: Path, disk_bytes: int = 1 << 30) -> dict:
    return {"name": "emb", "dim": 16, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"},
            "eviction": {"max_bytes": RAM_BYTES}, "tier": {"disk": {"path": str(path), "max_bytes": disk_bytes}}}


def push_all(c: PSClient) -> None:
    for part in np.array_split(KEYS, 6):  # pushes of 1,000 keys: each fits the RAM budget
        c.wait(c.push("emb", part, np.ones((part.shape[0], 16), np.float32)))


def test_saves_hold_both_tiers_and_a_killed_shard_recovers_them(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    with shard_processes(tmp_path, [tiered(tier)], n=1) as shards, shards.client(timeout_s=30.0, retries=0) as c:
        push_all(c)
        c.admin.save(mode=SaveMode.BASE)
        push_all(c)
        c.admin.save(mode=SaveMode.DELTA)
        push_all(c)  # never saved
        st = c.admin.stats()[0]["tables"]["emb"]
        assert st["disk_rows"] > st["rows"] and st["rows"] + st["disk_rows"] == KEYS.shape[0], st
        assert st["demoted"] > 0 and st["updated_on_disk"] > 0 and st["evicted_by_budget"] == 0  # pushed in place
        np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS)), -3.0)
        before = sorted(p.name for p in tier.glob("shard-*/*.tier")) or sorted(p.name for p in tier.glob("*.tier"))
        assert len(before) == 1

        shards.kill(0)
        shards.start(0)
        shards.wait_healthy()
        with pytest.raises(ShardRestarted):
            c.wait(c.pull("emb", KEYS[:1]))
        st = c.admin.stats()[0]["tables"]["emb"]
        assert st["rows"] + st["disk_rows"] == KEYS.shape[0] and st["disk_rows"] > 0  # restored into both tiers
        assert st["bytes"] + st["disk_index_bytes"] <= st["max_bytes"] == RAM_BYTES  # RAM took its budget only
        assert st["evicted_by_budget"] == 0
        np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS)), -2.0)  # both saves, not the unsaved push
        after = sorted(p.name for p in tier.glob("*.tier"))
        assert len(after) == 1 and after != before  # the killed shard's file was removed, a new one started


def test_a_full_disk_is_counted_and_the_ram_tier_keeps_serving(request: pytest.FixtureRequest,
                                                               tmp_path: Path) -> None:
    if not can_mount():
        rerun_as_namespace_root(request, tmp_path)
        return
    ps_yaml = tmp_path / "ps.yaml"
    with small_disk(tmp_path / "disk", "128k") as disk:
        ps_yaml.write_text(yaml.safe_dump({"tables": [tiered(disk.path)]}))
        with shard_with_metrics(tmp_path, ps_yaml) as shard, PSClient(
                [shard.endpoint], config=ClientConfig(timeout_s=30, retries=2)) as c:
            push_all(c)
            got = samples(scrape(shard.metrics_url))
            emb = labels(shard="0", table="emb")
            st = c.admin.stats()[0]["tables"]["emb"]
            assert got[("streamrec_shard_tier_disk_full_total", emb)] == st["disk_full"] > 0, st
            assert st["disk_bytes"] <= 128 << 10
            assert st["evicted_by_budget"] > 0  # what the disk had no room for: the budget's own rule
            rows = {t: got[("streamrec_shard_tier_rows", labels(shard="0", table="emb", tier=t))]
                    for t in ("ram", "disk")}
            assert rows == {"ram": st["rows"], "disk": st["disk_rows"]} and rows["disk"] > 0
            assert got[("streamrec_shard_tier_moved_rows_total", labels(shard="0", table="emb",
                                                                         direction="demoted"))] == st["demoted"] > 0
            assert got[("streamrec_shard_tier_moved_rows_total", labels(shard="0", table="emb",
                                                                         direction="created"))] == st["created_on_disk"]
            assert got[("streamrec_shard_tier_disk_max_bytes", emb)] == st["disk_max_bytes"]
            assert got[("streamrec_shard_tier_disk_updates_total", emb)] == st["updated_on_disk"]
            ram_hits = got[("streamrec_shard_tier_lookups_total", labels(shard="0", table="emb", tier="ram"))]
            assert ram_hits == st["ram_hits"]
            c.wait(c.push("emb", KEYS[:100], np.ones((100, 16), np.float32)))  # RAM serves on
            assert c.wait(c.pull("emb", KEYS[:100])).shape == (100, 16)
