"""Similar items and vector search: exact for the flat index, recall >= 0.95 for IVF/HNSW,
uint64 item ids (0, 2**63, 2**64-1 included) mapped safely through Faiss's int64 ids."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import NotFound
from service.settings import IndexSettings
from service.vector_index import ItemIndex

from .service_support import BundleBuilder, make_settings, random_items, started, wait_until

EDGE_IDS = [0, (1 << 64) - 1, 1 << 63]


def brute_force(ids: np.ndarray, vecs: np.ndarray, q: np.ndarray, k: int, skip: int | None = None) -> list[int]:
    scores = vecs @ q
    order = [int(i) for i in ids[np.argsort(-scores, kind="stable")] if skip is None or int(i) != skip]
    return order[:k]


def test_similar_and_search_equal_brute_force_on_the_exact_index(client, builder: BundleBuilder) -> None:
    ids, vecs = random_items(np.random.default_rng(1), 300, builder.model.tower_dim)  # the fixture's items
    for item in [*EDGE_IDS, int(ids[100])]:
        r = client.get(f"/v1/items/{item}/similar", params={"k": 10})
        assert r.status_code == 200, r.text
        got = [x["id"] for x in r.json()["items"]]
        pos = int(np.flatnonzero(ids == np.uint64(item))[0])
        assert got == brute_force(ids, vecs, vecs[pos], 10, skip=item)
        scores = [x["score"] for x in r.json()["items"]]
        assert scores == sorted(scores, reverse=True)
    q = np.random.default_rng(5).standard_normal(builder.model.tower_dim).astype(np.float32)
    r = client.post("/v1/search", json={"vector": q.tolist(), "k": 300})
    assert [x["id"] for x in r.json()["items"]] == brute_force(ids, vecs, q, 300)
    assert set(EDGE_IDS) <= {x["id"] for x in r.json()["items"]}


def test_bad_item_requests(client) -> None:
    r = client.get("/v1/items/12345/similar")
    assert r.status_code == 404 and "12345" in r.json()["error"]["message"]
    r = client.post("/v1/search", json={"vector": [1.0, 2.0], "k": 3})
    assert r.status_code == 422 and "8" in r.json()["error"]["message"]
    for bad in ({"vector": [1e39] * 8, "k": 3}, {"vector": ["x"] * 8}, {"vector": [1.0] * 8, "k": 0}):
        r = client.post("/v1/search", json=bad)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", bad
    r = client.get(f"/v1/items/{1 << 64}/similar")
    assert r.status_code == 422


def test_item_delta_upserts_into_the_served_index(tmp_path) -> None:
    b = BundleBuilder(tmp_path / "exports")
    b.push("user", np.arange(1, 10, dtype=np.uint64))
    rng = np.random.default_rng(3)
    ids, vecs = random_items(rng, 200, 8)
    b.export("base", items=(ids, vecs))
    with started(make_settings(b.root)) as client:
        new_ids, _ = random_items(rng, 50, 8)
        changed = np.concatenate([ids[:20], new_ids[3:]])  # 20 moved items, 47 new ones
        changed_vecs = rng.standard_normal((changed.shape[0], 8)).astype(np.float32)
        b.export("delta", items=(changed, changed_vecs), items_full=False)
        wait_until(lambda: client.get("/readyz").json().get("version") == 2, what="delta")
        all_ids = np.concatenate([ids[20:], changed])
        all_vecs = np.concatenate([vecs[20:], changed_vecs])
        for item in (int(ids[0]), int(new_ids[10]), int(ids[50])):
            got = [x["id"] for x in client.get(f"/v1/items/{item}/similar", params={"k": 15}).json()["items"]]
            pos = int(np.flatnonzero(all_ids == np.uint64(item))[0])
            assert got == brute_force(all_ids, all_vecs, all_vecs[pos], 15, skip=item)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_index_recall_at_least_095(kind: str) -> None:
    rng = np.random.default_rng(11)
    ids, vecs = random_items(rng, 20_000, 16, clusters=64)
    settings = IndexSettings(kind=kind, nlist=64, nprobe=16)
    index = ItemIndex.build(settings, ids, vecs)
    assert index.kind == kind
    # half of the approximate index sees a delta too: recall must hold after updates
    moved = rng.standard_normal((2000, 16)).astype(np.float32) * 3
    index = index.upserted(ids[:2000], moved)
    vecs = vecs.copy()
    vecs[:2000] = moved
    queries = vecs[rng.choice(ids.shape[0], 100, replace=False)]
    hits = 0
    for q in queries:
        got, _ = index.search(q, 10)
        hits += len(set(got[0].tolist()) & set(brute_force(ids, vecs, q, 10)))
    assert hits / (10 * queries.shape[0]) >= 0.95


def test_ivf_retrains_after_enough_changes_and_keeps_ids() -> None:
    rng = np.random.default_rng(2)
    ids, vecs = random_items(rng, 5000, 8, clusters=16)
    index = ItemIndex.build(IndexSettings(kind="ivf", nlist=32, rebuild_fraction=0.1), ids, vecs)
    assert not index.needs_rebuild()
    index = index.upserted(ids[:600], vecs[:600] + 1)
    assert index.needs_rebuild()
    fresh = index.rebuilt()
    assert fresh.changed == 0 and fresh.size == index.size and not fresh.needs_rebuild()
    for item in EDGE_IDS:
        assert np.array_equal(fresh.vectors[fresh.position_of(item)], index.vectors[index.position_of(item)])
    with pytest.raises(NotFound):
        fresh.position_of(12345)


def test_searches_during_item_updates_are_safe(tmp_path) -> None:
    """Readers search while deltas upsert items (and IVF retrains): every search answers from
    one whole snapshot: k results, each id known to that bundle's item set."""
    import threading

    from service.model_store import ModelStore

    b = BundleBuilder(tmp_path / "exports")
    b.push("user", np.arange(1, 10, dtype=np.uint64))
    rng = np.random.default_rng(4)
    ids, vecs = random_items(rng, 3000, 8, clusters=8)
    b.export("base", items=(ids, vecs))
    store = ModelStore(b.root, IndexSettings(kind="ivf", nlist=16, rebuild_fraction=0.05))
    store.apply(1)
    known = {1: set(ids.tolist())}
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        q = np.random.default_rng(9).standard_normal(8).astype(np.float32)
        while not stop.is_set():
            try:
                with store.read() as side:
                    got, _ = side.items.search(q, 20)
                    assert got[0].shape[0] == 20 and set(got[0].tolist()) <= known[side.version]
            except BaseException as err:
                errors.append(err)
                return

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for v in range(2, 6):
            new_ids, new_vecs = random_items(rng, 400, 8, clusters=8)
            b.export("delta", items=(new_ids, new_vecs), items_full=False)
            known[v] = known[v - 1] | set(new_ids.tolist())
            store.apply(v)
            assert store.rebuild_index_if_due()  # 400 of ~3000 changed: past 5%, retrained and swapped
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert store.status()["items"] == len(known[5])
