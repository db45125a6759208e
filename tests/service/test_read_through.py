"""Read-through: lookups prefer the live shards' rows, report ids no one has, and fall back to
the bundle (counted) when the shards are gone. Real shard processes, real app."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from service.settings import ReadThroughSettings
from tests.ps.ps_harness import shard_processes

from .service_support import USER_IDS, BundleBuilder, make_settings, started

pytestmark = pytest.mark.process


def _lookup(client, ids) -> dict:
    r = client.post("/v1/embeddings:lookup", json={"slot": "user", "ids": [int(i) for i in ids]})
    assert r.status_code == 200, r.text
    return r.json()


def test_lookups_read_through_to_live_shards_and_fall_back_to_the_bundle(tmp_path: Path) -> None:
    b = BundleBuilder(tmp_path / "exports")
    b.push("user", USER_IDS[:20])
    b.export("base")
    table = b.table_of("user")
    config = next(c for c in b.model.table_configs() if c.name == table)
    fresh_ids = np.concatenate([USER_IDS[:3], np.array([7], np.uint64)])  # 7 is in no bundle
    asked = np.concatenate([USER_IDS[:5], np.array([7, 8], np.uint64)])  # 8 is nowhere
    bundle_found, bundle_rows = b.expected("user", asked)
    (tmp_path / "ps").mkdir()
    with shard_processes(tmp_path / "ps", [config.model_dump(mode="json")], n=2) as shards:
        with shards.client() as ps:
            grads = np.full((fresh_ids.shape[0], config.width), 0.5, np.float32)
            ps.wait(ps.push(table, fresh_ids, grads))
            live_rows, live_found = ps.wait(ps.pull_existing(table, fresh_ids))
        assert live_found.all()
        rt = ReadThroughSettings(endpoints=shards.endpoints, timeout_s=2.0)
        with started(make_settings(b.root, read_through=rt)) as client:
            body = _lookup(client, asked)
            assert body["missing"] == [8], "an id neither the bundle nor the shards hold is reported"
            assert body["ids"] == [int(i) for i in asked if i != 8]
            rows = {i: np.array(r, np.float32) for i, r in zip(body["ids"], body["rows"], strict=True)}
            for i, k in enumerate(fresh_ids):
                np.testing.assert_array_equal(rows[int(k)], live_rows[i])  # the live row, not the bundle's
            for k in USER_IDS[3:5]:  # not on the shards: the bundle's row
                np.testing.assert_array_equal(rows[int(k)], bundle_rows[int(np.flatnonzero(asked == k)[0])])
            for i in range(len(shards.procs)):
                shards.kill(i)
            fallback = _lookup(client, asked)
            assert fallback["missing"] == [int(k) for k in asked[~bundle_found]]
            np.testing.assert_array_equal(np.array(fallback["rows"], np.float32), bundle_rows)
            metrics = client.get("/metrics").text
            assert "streamrec_read_through_unavailable_total 1" in metrics
            assert "streamrec_read_through_served_total 1" in metrics
