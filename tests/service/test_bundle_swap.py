"""Bundles apply in order and atomically; a corrupt or inconsistent one is rejected while the
previous version keeps serving, and its error shows on /admin/status."""

from __future__ import annotations

import json
import shutil
import threading
import time

import numpy as np

from exports.bundle import bundle_dir, table_dir
from service.model_store import ModelStore
from service.settings import IndexSettings

from .service_support import ITEM_IDS, USER_IDS, BundleBuilder, auth, wait_until


def _rows(store: ModelStore, slot: str, ids: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    with store.read() as side:
        found, rows = side.lookup(slot, ids)
        return side.version, found, rows


def _corrupt(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_delta_is_rejected_and_the_old_version_keeps_serving(builder: BundleBuilder) -> None:
    store = ModelStore(builder.root, IndexSettings())
    store.apply(1)
    assert store.status()["standby_version"] == 1  # the first bundle goes to both sides
    before = _rows(store, "user", USER_IDS)
    builder.push("user", USER_IDS[:100])
    builder.push("item", ITEM_IDS[:100])
    builder.export("delta")
    good_copy = builder.root / "good-copy"
    shutil.copytree(bundle_dir(builder.root, 2), good_copy)
    # the last table applied (emb8, shard 1) is damaged: the other tables took the delta on the standby side
    _corrupt(table_dir(bundle_dir(builder.root, 2) / "shard-1", "emb8") / "emb8.rows")
    try:
        store.apply(2)
        raise AssertionError("a corrupt bundle was applied")
    except Exception as err:
        assert getattr(err, "code", None) == "corrupt_data", err
    after = _rows(store, "user", USER_IDS)
    assert after[0] == 1 and np.array_equal(after[2], before[2])
    assert store.status()["last_error"]["version"] == 2 and "emb8.rows" in store.status()["last_error"]["message"]
    # the same delta, intact, re-published as version 3 on parent 1: the dirty standby is replayed first
    good = json.loads((good_copy / "bundle.json").read_text())
    good["version"] = 3
    (good_copy / "bundle.json").write_text(json.dumps(good))
    good_copy.rename(bundle_dir(builder.root, 3))
    store.apply(3)
    builder.version = 3
    for v in (4, 5):  # two more deltas: each side of the store serves once
        builder.push("user", USER_IDS[100 * v : 100 * v + 50])
        builder.export("delta")
        store.apply(v)
        version, found, rows = _rows(store, "user", USER_IDS)
        assert version == v and found.all() and store.status()["standby_version"] == v
        assert np.array_equal(rows, builder.expected("user", USER_IDS)[1])
        assert np.array_equal(_rows(store, "item", ITEM_IDS)[2], builder.expected("item", ITEM_IDS)[1])


def test_out_of_chain_and_malformed_bundles_are_rejected(client, builder: BundleBuilder, tmp_path) -> None:
    # version 2 is built and torn outside the watched dir, then renamed in: the watcher polling
    # meanwhile must never see it whole (it did, under load, when it was torn in place)
    watched, builder.root = builder.root, tmp_path / "aside"
    builder.push("user", USER_IDS[:10])
    builder.export("delta")  # version 2
    (bundle_dir(builder.root, 2) / "bundle.json").write_text("{\"version\": 2")  # torn manifest
    bundle_dir(builder.root, 2).rename(bundle_dir(watched, 2))
    builder.root = watched
    builder.push("user", USER_IDS[:10])
    builder.export("delta")  # version 3: its parent 2 never became servable
    reload = client.post("/admin/reload", headers=auth()).json()
    assert reload["applied"] == [] and reload["version"] == 1
    store = client.app.state.store  # the watcher may have met version 2 before the reload did
    assert store.rejected[2]["code"] == "corrupt_data" and store.rejected[3]["code"] == "conflict"
    status = client.get("/admin/status", headers=auth()).json()["bundle"]
    assert status["version"] == 1
    assert status["last_error"]["code"] == "conflict" and "delta of 2" in status["last_error"]["message"]
    lookup = client.post("/v1/embeddings:lookup", json={"slot": "user", "ids": [int(USER_IDS[0])]})
    assert lookup.status_code == 200 and lookup.json()["version"] == 1
    assert "streamrec_bundles_rejected 2" in client.get("/metrics").text
    # a new base recovers
    builder.export("base")
    wait_until(lambda: client.get("/readyz").json().get("version") == 4, what="base 4")


def _rejected(client) -> list[int]:
    return [int(v) for v in client.app.state.store.rejected]


def test_readers_never_see_half_a_bundle(builder: BundleBuilder) -> None:
    """Every bundle rewrites all rows of both tables; concurrent readers pin a version and must
    see exactly that version's rows in both tables."""
    store = ModelStore(builder.root, IndexSettings())
    store.apply(1)
    expected = {1: (builder.expected("user", USER_IDS)[1], builder.expected("item", ITEM_IDS)[1])}
    seen: list[tuple[int, np.ndarray, np.ndarray]] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            with store.read() as side:
                u = side.lookup("user", USER_IDS)[1]
                time.sleep(0.001)  # widen the window in which a torn swap would show
                i = side.lookup("item", ITEM_IDS)[1]
                seen.append((side.version, u, i))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for v in range(2, 7):
            builder.push("user", USER_IDS)
            builder.push("item", ITEM_IDS)
            builder.export("delta")
            expected[v] = (builder.expected("user", USER_IDS)[1], builder.expected("item", ITEM_IDS)[1])
            store.apply(v)
            time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len({v for v, _, _ in seen}) >= 3
    for v, u, i in seen:
        assert np.array_equal(u, expected[v][0]) and np.array_equal(i, expected[v][1]), f"torn read at {v}"


def test_freshness_is_recorded_per_bundle(client) -> None:
    hist = client.get("/admin/status", headers=auth()).json()["bundle"]["history"]
    assert hist[-1]["version"] == 1 and 3.0 <= hist[-1]["freshness_s"] < 60
    metrics = client.get("/metrics").text
    assert "streamrec_bundle_version 1" in metrics and "streamrec_bundle_freshness_seconds" in metrics
    assert "streamrec_index_items 300" in metrics


def test_manifest_missing_fields_is_rejected_by_name_not_a_500(client, builder: BundleBuilder) -> None:
    builder.push("user", USER_IDS[:10])
    # made beside the watched root and moved in broken: the watcher (0.05 s) must never see it whole
    served, builder.root = builder.root, builder.root / "aside"
    builder.export("delta")  # version 2
    builder.root = served
    path = bundle_dir(served / "aside", 2) / "bundle.json"
    manifest = json.loads(path.read_text())
    del manifest["files"]["dense"]
    manifest["tables"] = "user"
    path.write_text(json.dumps(manifest))
    path.parent.rename(bundle_dir(served, 2))
    reload = client.post("/admin/reload", headers=auth())
    assert reload.status_code == 200 and reload.json()["version"] == 1
    rejected = client.app.state.store.rejected[2]
    assert rejected["code"] == "corrupt_data"
    assert "files.dense is missing" in rejected["message"] and "tables must be a list" in rejected["message"]
    again = client.post("/admin/reload", headers=auth()).json()  # rejected once, not retried on every poll
    assert again["applied"] == [] and again["rejected"] == []
    lookup = client.post("/v1/embeddings:lookup", json={"slot": "user", "ids": [int(USER_IDS[0])]})
    assert lookup.status_code == 200 and lookup.json()["version"] == 1
