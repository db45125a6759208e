"""A shard's /metrics (ps.shard_metrics, issue #12 finding 9) on a real shard process: keys
pulled and pushed, rows and bytes per table, refusals by error code and by reason, read from
the shard's own counters at scrape time; label values stay bounded whatever peers send."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from core.errors import NotFound
from ps.client import PSClient
from ps.ps_config import ClientConfig
from tests.prom_scrape import labels, samples, scrape, shard_with_metrics

pytestmark = pytest.mark.process

EMB = {"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 0.1}, "initializer": {"kind": "zeros"}}
BUDGETED = {**EMB, "name": "small", "eviction": {"max_bytes": 200_000, "over_budget": "refuse"}}


def test_a_shard_exports_its_keys_rows_bytes_and_refusals(tmp_path: Path) -> None:
    ps_yaml = tmp_path / "ps.yaml"
    ps_yaml.write_text(yaml.safe_dump({"tables": [EMB, BUDGETED]}))
    with shard_with_metrics(tmp_path, ps_yaml) as shard, PSClient(
            [shard.endpoint], config=ClientConfig(timeout_s=30, retries=2)) as client:
        before = samples(scrape(shard.metrics_url))
        assert before[("streamrec_shard_table_rows", labels(shard="0", table="emb"))] == 0

        keys = np.arange(1, 301, dtype=np.uint64)
        client.wait(client.pull("emb", keys))
        client.wait(client.push("emb", keys, np.ones((300, 4), np.float32)))
        client.wait(client.push("emb", keys[:100], np.ones((100, 4), np.float32)))
        many = np.arange(1, 20_001, dtype=np.uint64)  # more rows than the small table's byte budget holds
        client.wait(client.push("small", many, np.ones((many.shape[0], 4), np.float32)))
        with pytest.raises(NotFound):
            client.wait(client.pull("no_such_table", keys))
        stats = client.admin.stats()[0]

        got = samples(scrape(shard.metrics_url))
        emb, small = labels(shard="0", table="emb"), labels(shard="0", table="small")
        assert got[("streamrec_shard_pulled_keys_total", emb)] == 300
        assert got[("streamrec_shard_pushed_keys_total", emb)] == 400
        assert got[("streamrec_shard_table_rows", emb)] == 300
        assert got[("streamrec_shard_table_bytes", emb)] == stats["tables"]["emb"]["bytes"] > 0
        small_stats = stats["tables"]["small"]
        assert got[("streamrec_shard_table_max_bytes", small)] == small_stats["max_bytes"] == 200_000
        assert ("streamrec_shard_table_max_bytes", emb) not in got  # no budget: no series
        refused = got[("streamrec_shard_refused_keys_total", labels(shard="0", table="small", reason="budget"))]
        assert refused == small_stats["refused_by_budget"] > 0
        assert got[("streamrec_shard_table_rows", small)] == small_stats["rows"] == 20_000 - refused
        assert got[("streamrec_shard_refused_requests_total", labels(code="not_found", shard="0"))] == 1
        assert got[("streamrec_shard_requests_total", labels(op="push_sparse", shard="0"))] >= 3


def test_label_values_stay_bounded_whatever_peers_send(tmp_path: Path) -> None:
    """Requests naming a thousand invented tables add no series: table labels come from the config."""
    ps_yaml = tmp_path / "ps.yaml"
    ps_yaml.write_text(yaml.safe_dump({"tables": [EMB]}))
    with shard_with_metrics(tmp_path, ps_yaml) as shard, PSClient(
            [shard.endpoint], config=ClientConfig(timeout_s=30, retries=0)) as client:
        before = len(samples(scrape(shard.metrics_url)))
        keys = np.arange(3, dtype=np.uint64)
        for i in range(1000):
            with pytest.raises(NotFound):
                client.wait(client.pull(f"invented-{i}", keys))
        got = samples(scrape(shard.metrics_url))
        assert got[("streamrec_shard_refused_requests_total", labels(code="not_found", shard="0"))] == 1000
        assert len(got) <= before + 2  # the refusal code and the op: one new series each
        assert not any("invented" in str(labels) for _, labels in got)
