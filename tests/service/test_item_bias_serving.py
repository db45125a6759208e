"""A two_tower with ``retrieval.item_bias`` serves its items as [v, temperature * b] and its users
as [u, 1]: /v1/recommend ranks by the softmax's logit, similar items by the item tower alone,
and lookup reads the slots' own rows (the bias table is apart)."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.settings import IndexSettings
from service.vector_index import ItemIndex

from .service_support import ITEM_IDS, SMALL_MODEL, USER_IDS, BundleBuilder, make_settings, random_items, started
from .test_item_search import brute_force
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
