"""/v1/predict and /v1/recommend score with exports.predictor.Predictor over the served bundle:
the results equal a Predictor reading the trainer-side tables directly."""

from __future__ import annotations

import anyio.to_thread
import numpy as np
import pytest
from fastapi.testclient import TestClient

from exports.predictor import Predictor, instances_to_batch
from ps.routing import shard_of

from .service_support import ITEM_IDS, USER_IDS, BundleBuilder, random_items
from .test_item_search import brute_force

INSTANCES = [
    {"dense": [0.5, 3.0], "slots": {"user": [int(USER_IDS[0]), int(USER_IDS[7])], "item": [int(ITEM_IDS[2])]}},
    {"dense": [1.0], "slots": {"user": [int(USER_IDS[9]), 123456789], "item": []}},  # an unknown id
    {"slots": {"user": [], "item": [int(ITEM_IDS[4])]}, "label": 1},
]


def reference(builder: BundleBuilder) -> Predictor:
    def lookup(table: str, keys: np.ndarray) -> np.ndarray:
        shards = builder.tables[table]
        out = np.empty((keys.shape[0], shards[0].width), np.float32)
        where = shard_of(keys, len(shards))
        for i, t in enumerate(shards):
            out[where == i] = t.pull(keys[where == i])
        return out

    return Predictor(builder.model.model_dump(mode="json"), builder.dense, lookup)


def _batch(builder: BundleBuilder, instances: list[dict]):
    return instances_to_batch(instances, slots=[s.name for s in builder.model.slots], n_dense=builder.model.n_dense)


def test_predict_matches_the_model_on_the_exported_rows(client: TestClient, builder: BundleBuilder) -> None:
    r = client.post("/v1/predict", json={"instances": INSTANCES})
    assert r.status_code == 200, r.text
    want = reference(builder).predict(_batch(builder, INSTANCES))
    assert r.json()["version"] == 1
    np.testing.assert_allclose(r.json()["scores"], want, rtol=1e-6)
    many = INSTANCES * 40  # a batch big enough to be scored off the event loop
    r = client.post("/v1/predict", json={"instances": many})
    np.testing.assert_allclose(r.json()["scores"], np.tile(want, 40), rtol=1e-6)


def test_recommend_is_top_k_of_the_user_vector(client: TestClient, builder: BundleBuilder) -> None:
    user = {"dense": [0.2, 0.1], "slots": {"user": [int(USER_IDS[1]), int(USER_IDS[2])]}}
    q = reference(builder).user_vectors(_batch(builder, [user]))[0]
    ids, vecs = random_items(np.random.default_rng(1), 300, builder.model.tower_dim)
    want = brute_force(ids, vecs, q, 20)
    r = client.post("/v1/recommend", json={"user": user, "k": 10})
    assert r.status_code == 200, r.text
    assert [x["id"] for x in r.json()["items"]] == want[:10]
    r = client.post("/v1/recommend", json={"user": user, "k": 10, "exclude": want[:5]})
    assert [x["id"] for x in r.json()["items"]] == want[5:15]


def test_bad_instances_are_422_naming_the_field(client: TestClient) -> None:
    cases = [
        ({"instances": []}, "instances"),
        ({"instances": [{"slots": {"nope": [1]}}]}, "nope"),
        ({"instances": [{"dense": [1, 2, 3]}]}, "dense"),
        ({"instances": [{"label": 2}]}, "label"),
        ({"instances": [{"slots": {"user": [-5]}}]}, "user"),
        ({"instances": [{"dense": ["NaN"]}]}, "dense"),
        ({"instances": [{"dense": [1e300]}]}, "dense"),
        ({"instances": [{}] * 1001}, "1000"),
    ]
    for body, word in cases:
        r = client.post("/v1/predict", json=body)
        assert r.status_code == 422, (body, r.text)
        assert word in r.json()["error"]["message"], (word, r.json())
    r = client.post("/v1/recommend", json={"user": {"slots": {"user": [1]}}, "k": 100_000})
    assert r.status_code == 422 and "k" in r.json()["error"]["message"]


def test_recommend_runs_on_the_event_loop(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # a hop to the thread pool (e.g. a plain-def dependency) is two thread wake-ups per request,
    # which a loaded machine delays by milliseconds: the recommend p99
    hops: list[object] = []
    real = anyio.to_thread.run_sync

    async def counted(func, *args, **kwargs):
        hops.append(func)
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    r = client.post("/v1/recommend", json={"user": {"slots": {"user": [int(USER_IDS[1])]}}, "k": 5})
    assert r.status_code == 200, r.text
    assert hops == []
