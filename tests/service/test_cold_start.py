"""/v1/recommend for a user the model knows nothing of: the items most liked lately, by the
item-id rows' decayed positive counts (service.cold_start); a known user keeps the towers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from ps.routing import shard_of

from .service_support import ITEM_IDS, USER_IDS, BundleBuilder, make_settings, started
from .test_item_search import brute_force
from .test_predict_recommend import _batch, reference

NEW_USER = 987_654_321  # never pushed


def _count(builder: BundleBuilder, ids: np.ndarray, clicks: np.ndarray) -> None:
    """One push per item with ``clicks`` positives out of ``clicks + 1`` shows."""
    table = builder.table_of("item")
    where = shard_of(ids, builder.num_shards)
    for i, t in enumerate(builder.tables[table]):
        sel = where == i
        if sel.any():
            t.push(ids[sel], np.zeros((int(sel.sum()), t.width), np.float32), shows=clicks[sel] + 1,
                   clicks=clicks[sel])


def _end_passes(builder: BundleBuilder, n: int) -> None:
    for shards in builder.tables.values():
        for t in shards:
            for _ in range(n):
                t.end_pass()


@pytest.fixture
def builder(tmp_path: Path) -> BundleBuilder:
    """Items 0..59 of ITEM_IDS in the index; item j liked 60 - j times, except that item 59's
    likes come 30 passes after the rest, which decay meanwhile (0.98 per pass)."""
    b = BundleBuilder(tmp_path / "exports")
    b.push("user", USER_IDS)
    items = ITEM_IDS[:60]
    _count(b, items[:59], np.arange(60, 1, -1, dtype=np.float32))
    _end_passes(b, 30)
    _count(b, items[59:], np.array([50.0], np.float32))
    vecs = np.random.default_rng(2).standard_normal((60, b.model.tower_dim)).astype(np.float32)
    b.export("base", items=(items, vecs), newest_record_time=time.time())
    b.item_vectors = vecs
    return b


def _ranked(builder: BundleBuilder) -> list[int]:
    items = ITEM_IDS[:60]
    decayed = np.concatenate([np.arange(60, 1, -1) * 0.98**30, [50.0]])
    return [int(items[i]) for i in np.argsort(-decayed, kind="stable")]


@pytest.fixture
def client(builder: BundleBuilder) -> Iterator[TestClient]:
    with started(make_settings(builder.root)) as c:
        yield c


def test_a_new_user_gets_the_items_most_liked_lately(client: TestClient, builder: BundleBuilder) -> None:
    want = _ranked(builder)
    assert want[0] == int(ITEM_IDS[59])  # the recent likes outrank older, more numerous ones
    r = client.post("/v1/recommend", json={"user": {"slots": {"user": [NEW_USER]}}, "k": 10})
    assert r.status_code == 200, r.text
    got = r.json()["items"]
    assert [x["id"] for x in got] == want[:10]
    np.testing.assert_allclose([x["score"] for x in got], [50.0, *(np.arange(60, 51, -1) * 0.98**30)], rtol=1e-4)
    r = client.post("/v1/recommend", json={"user": {"slots": {"user": [NEW_USER]}}, "k": 5, "exclude": want[:3]})
    assert [x["id"] for x in r.json()["items"]] == want[3:8]
    r = client.post("/v1/recommend", json={"user": {"slots": {"user": []}}, "k": 3})  # no ids at all: cold too
    assert [x["id"] for x in r.json()["items"]] == want[:3]
    metrics = client.get("/metrics").text
    assert "streamrec_recommend_cold_start_total 3.0" in metrics


def test_a_known_user_keeps_the_towers(client: TestClient, builder: BundleBuilder) -> None:
    user = {"slots": {"user": [int(USER_IDS[1]), NEW_USER]}}  # one id with a row is enough
    q = reference(builder).user_vectors(_batch(builder, [user]))[0]
    want = brute_force(ITEM_IDS[:60], builder.item_vectors, q, 10)
    r = client.post("/v1/recommend", json={"user": user, "k": 10})
    assert r.status_code == 200, r.text
    assert [x["id"] for x in r.json()["items"]] == want


def test_cold_start_model_serves_the_towers_vector_of_nothing(builder: BundleBuilder) -> None:
    user = {"slots": {"user": [NEW_USER]}}
    q = reference(builder).user_vectors(_batch(builder, [user]))[0]
    want = brute_force(ITEM_IDS[:60], builder.item_vectors, q, 10)
    with started(make_settings(builder.root, cold_start="model")) as c:
        r = c.post("/v1/recommend", json={"user": user, "k": 10})
    assert r.status_code == 200, r.text
    assert [x["id"] for x in r.json()["items"]] == want
