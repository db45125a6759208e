"""A two_tower with ``retrieval.item_bias`` serves its items as [v, temperature * b] and its users
as [u, 1]: /v1/recommend ranks by the softmax's logit, similar items by the item tower alone,
and lookup reads the slots' own rows (the bias table is apart)."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from exports.predictor import Predictor
from logrecords.batch import Batch
from service.settings import IndexSettings, ReadThroughSettings
from service.vector_index import ItemIndex
from tests.ps.ps_harness import shard_processes

from .service_support import (
    ITEM_IDS,
    SMALL_MODEL,
    USER_IDS,
    BundleBuilder,
    make_settings,
    random_items,
    started,
    wait_until,
)
from .test_item_search import brute_force
from .test_live_items import ITEMS, MODEL, SCHEMA, USERS
from .test_predict_recommend import _batch, reference

BIASED = {**SMALL_MODEL, "retrieval": {"item_bias": {"kind": "adagrad", "lr": 0.1}, "temperature": 0.25}}


def test_recommend_ranks_by_the_logit_and_similar_ignores_the_bias_column(tmp_path) -> None:
    b = BundleBuilder(tmp_path / "exports", model=BIASED)
    b.push("user", USER_IDS)
    b.push("item", ITEM_IDS)
    ids, towers = random_items(np.random.default_rng(1), 300, b.model.tower_dim)
    bias = np.random.default_rng(2).normal(0.0, 3.0, ids.shape[0]).astype(np.float32)  # big: it reorders
    vecs = np.hstack([towers, (0.25 * bias)[:, None]])
    b.export("base", items=(ids, vecs))
    user = {"dense": [0.2, 0.1], "slots": {"user": [int(USER_IDS[1]), int(USER_IDS[2])]}}
    q = reference(b).user_vectors(_batch(b, [user]))[0]
    assert q.shape == (9,) and q[-1] == 1.0
    by_logit = brute_force(ids, (towers @ q[:-1] / 0.25 + bias)[:, None], np.ones(1), 10)  # <u, v> / T + b
    assert by_logit != brute_force(ids, towers, q[:-1], 10)  # the bias matters here
    with started(make_settings(b.root)) as client:
        client: TestClient
        r = client.post("/v1/recommend", json={"user": user, "k": 10})
        assert r.status_code == 200, r.text
        assert [x["id"] for x in r.json()["items"]] == by_logit
        for item in (int(ids[7]), int(ids[100])):
            r = client.get(f"/v1/items/{item}/similar", params={"k": 10})
            assert r.status_code == 200, r.text
            pos = int(np.flatnonzero(ids == np.uint64(item))[0])
            assert [x["id"] for x in r.json()["items"]] == brute_force(ids, towers, towers[pos], 10, skip=item)
            np.testing.assert_allclose(r.json()["items"][0]["score"],
                                       np.sort(np.delete(towers @ towers[pos], pos))[-1], rtol=1e-5)
        r = client.post("/v1/embeddings:lookup", json={"slot": "item", "ids": [int(ITEM_IDS[3])]})
        assert r.status_code == 200, r.text
        row = reference(b).lookup(b.table_of("item"), ITEM_IDS[3:4])[0]
        assert r.json()["table"] == b.table_of("item") and len(r.json()["rows"][0]) == 17  # wide + 16
        np.testing.assert_allclose(r.json()["rows"][0], row, rtol=1e-6)


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_similar_items_leave_the_prior_column_out_in_every_index_kind(kind: str) -> None:
    rng = np.random.default_rng(12)
    ids, towers = random_items(rng, 3_000, 8, clusters=32)
    # tower norms ~8.5; a served prior column is T * b (~0.05 x a few): 3.0 is far more, still a fair test
    prior = rng.normal(0.0, 3.0, (ids.shape[0], 1)).astype(np.float32)
    index = ItemIndex.build(IndexSettings(kind=kind, nlist=32, nprobe=8), ids, np.hstack([towers, prior]))
    assert index.kind == kind and index.dim == 9
    hits = 0
    for pos in rng.choice(ids.shape[0], 40, replace=False):
        got, scores = index.similar(int(ids[pos]), 10, prior_columns=1)
        want = brute_force(ids, towers, towers[pos], 10, skip=int(ids[pos]))
        hits += len(set(got.tolist()) & set(want))
        if kind == "flat":
            assert got.tolist() == want
            np.testing.assert_allclose(scores, np.sort(np.delete(towers @ towers[pos], pos))[::-1][:10], rtol=1e-4)
    assert hits / 400 >= 0.95


@pytest.mark.process
def test_the_live_item_path_serves_the_item_bias_column(tmp_path) -> None:
    """Items changed between bundles are re-embedded from live rows with their live bias rows."""

    model = {**MODEL, "retrieval": {"item_bias": {"kind": "adagrad"}, "temperature": 0.5}}
    b = BundleBuilder(tmp_path / "exports", model, schema=SCHEMA.model_dump(mode="json"))
    b.push("user", USERS)
    b.push("item", ITEMS[:30])
    b.export("base", items=(ITEMS[:30], np.random.default_rng(1).standard_normal((30, 9)).astype(np.float32)))
    configs = {c.name: c for c in b.model.table_configs()}
    emb, bias = b.table_of("item"), "bias.items"
    (tmp_path / "ps").mkdir()
    with shard_processes(tmp_path / "ps", [c.model_dump(mode="json") for c in configs.values()], n=2) as shards, \
            shards.client() as ps:
        rt = ReadThroughSettings(endpoints=shards.endpoints, timeout_s=2.0, items_interval_s=0.02)
        with started(make_settings(b.root, read_through=rt)) as client:
            live, store = client.app.state.live, client.app.state.store
            wait_until(lambda: live.status()["cursors"] is not None, what="the live path following the shards")
            ids = ITEMS[:4]
            ps.wait(ps.push(bias, ids, np.array([[1.0], [-2.0], [3.0], [0.5]], np.float32)))  # biases first
            ps.wait(ps.push(emb, ids, np.full((4, configs[emb].width), 0.25, np.float32)))  # then the logged change
            wait_until(lambda: live.items_refreshed >= 4, what="the live refresh")
            rows = {t: ps.wait(ps.pull_existing(t, ids)).rows for t in (emb, bias)}
            assert (rows[bias][:, 0] != 0).all()
            by_id = {t: {int(i): r for i, r in zip(ids, rows[t], strict=True)} for t in rows}
            p = Predictor(b.model.model_dump(mode="json"), b.dense,
                          lambda t, keys: np.stack([by_id[t][int(k)] for k in keys]))
            want = p.item_vectors(Batch(labels=np.zeros(4, np.float32), dense=np.zeros((4, 0), np.float32),
                                        slots={"item": (ids, np.arange(5, dtype=np.int64))}, item_id=ids))
            np.testing.assert_allclose(want[:, -1], 0.5 * rows[bias][:, 0], rtol=1e-6)
            with store.read() as side:
                got = side.items.vectors[[side.items.position_of(int(i)) for i in ids]]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
