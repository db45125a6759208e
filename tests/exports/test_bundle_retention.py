"""Bundle retention (exports.retention): the newest N bundles stay with the chains they need and
the chains services pin; the rest go, out of the listing in one step; a service meets a bundle
deleted between its listing and its load without rejecting it, and a base still applies after
the chain it served was deleted."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from core.errors import CorruptData, NotFound
from exports import retention
from exports.bundle import MANIFEST, TRASH_PREFIX, bundle_dir, discard_staging, list_versions, table_dir
from service.export_watcher import ExportWatcher
from service.model_store import ModelStore
from service.settings import IndexSettings
from stores.store import open_store
from tests.service.service_support import ITEM_IDS, USER_IDS, BundleBuilder


def _builder(root: Path, kinds: str) -> BundleBuilder:
    """Bundles 1.. of ``kinds`` ("b": a base, "d": a delta of the one before)."""
    b = BundleBuilder(root)
    b.push("item", ITEM_IDS)
    for i, k in enumerate(kinds):
        b.push("user", USER_IDS[100 * i: 100 * i + 100])
        b.export("base" if k == "b" else "delta")
    return b


def _leftovers(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if p.name.startswith((TRASH_PREFIX, ".staging-"))]


def test_plan_keeps_the_newest_with_their_chains_and_the_pinned_chains() -> None:
    parents = {1: None, 2: 1, 3: 2, 4: None, 5: 4, 6: 5, 7: 6, 8: None, 9: 8}
    assert retention.plan(parents, 2, set()) == [1, 2, 3, 4, 5, 6, 7]
    assert retention.plan(parents, 3, set()) == [1, 2, 3]  # 7 needs 4..6
    assert retention.plan(parents, 2, {3}) == [4, 5, 6, 7]  # a service serves 3: 1..3 stay
    assert retention.plan(parents, 20, set()) == []


def test_retention_deletes_all_but_the_newest_and_their_chains(tmp_path: Path) -> None:
    root = tmp_path / "exports"
    _builder(root, "bddbddd")
    assert retention.retain(root, 2) == [1, 2, 3]  # 6 and 7 are deltas of 4
    assert list_versions(root) == [4, 5, 6, 7] and not _leftovers(root)
    assert retention.retain(root, 2) == []
    assert list_versions(root) == [4, 5, 6, 7]


def test_a_half_deleted_bundle_is_out_of_the_listing_and_cleared_at_start(tmp_path: Path) -> None:
    root = tmp_path / "exports"
    _builder(root, "bd")
    os.rename(bundle_dir(root, 1), root / f"{TRASH_PREFIX}{1:010d}")  # a retention killed between its two steps
    assert list_versions(root) == [2]
    discard_staging(root)
    assert not _leftovers(root)


def test_a_served_chain_stays_until_its_marker_goes_stale(tmp_path: Path) -> None:
    root = tmp_path / "exports"
    b = _builder(root, "bdd")
    store = ModelStore(root, IndexSettings())
    watcher = ExportWatcher(store, poll_seconds=60)
    assert watcher.poll_once()["applied"] == [1, 2, 3]
    for k in "bddd":  # the trainer goes on: base 4, deltas 5..7; the service has not looked yet
        b.push("user", USER_IDS[:50])
        b.export("base" if k == "b" else "delta")
    assert retention.pinned_versions(open_store(root)) == {1, 2, 3}
    assert retention.retain(root, 2) == []  # 1..3 are served (a standby rebuild replays them), 4..7 the newest
    marker = root / watcher.marker.name
    data = json.loads(marker.read_text())
    old = time.time() - retention.MARKER_TTL_S - 60
    marker.write_text(json.dumps({**data, "at": old}))
    os.utime(marker, (old, old))  # a service that went away ten minutes ago
    assert retention.retain(root, 2) == [1, 2, 3]
    watcher.poll_once()  # the service catches up from the newest base on, and pins that chain
    assert store.version == 7 and retention.pinned_versions(open_store(root)) == {4, 5, 6, 7}
    watcher.stop()
    assert not marker.exists() and retention.pinned_versions(open_store(root)) == set()


def test_a_bundle_deleted_between_listing_and_load_is_skipped_not_rejected(tmp_path: Path) -> None:
    root = tmp_path / "exports"
    b = _builder(root, "b")
    store = ModelStore(root, IndexSettings())
    watcher = ExportWatcher(store, poll_seconds=60)
    watcher.poll_once()
    for k in "dbd":
        b.push("user", USER_IDS[:50])
        b.export("base" if k == "b" else "delta")
    assert watcher.pending() == [3, 4]
    retention.remove_bundle(open_store(root), 3)  # retention ran after the listing
    with pytest.raises(NotFound, match="deleted before it loaded"):
        store.apply(3)
    assert store.vanished == 1 and 3 not in store.rejected and store.version == 1
    with store.read() as side:
        assert side.lookup("user", USER_IDS[:10])[0].all()  # still serving bundle 1
    b.push("user", USER_IDS[:50])
    b.export("base")  # 5
    assert watcher.poll_once()["applied"] == [5] and store.version == 5 and not store.rejected


def test_a_base_applies_after_the_served_chain_was_deleted(tmp_path: Path) -> None:
    root = tmp_path / "exports"
    b = _builder(root, "b")
    store = ModelStore(root, IndexSettings())
    store.apply(1)
    b.push("user", USER_IDS[:100])
    b.export("delta")  # 2, damaged: the standby side took part of it and must be rebuilt before a delta
    rows = table_dir(bundle_dir(root, 2) / "shard-1", "emb8") / "emb8.rows"
    data = bytearray(rows.read_bytes())
    data[len(data) // 2] ^= 0xFF
    rows.write_bytes(bytes(data))
    with pytest.raises(CorruptData):
        store.apply(2)
    for v in (1, 2):  # the served chain is deleted (no marker pinned it: a read-only mount, say)
        retention.remove_bundle(open_store(root), v)
    b.push("user", USER_IDS[:100])
    b.export("base")  # 3 replaces every table: no rebuild from the deleted chain is needed
    store.apply(3)
    assert store.version == 3 and store.pinned() == [3]
    with store.read() as side:
        found, got = side.lookup("user", USER_IDS[:100])
    assert found.all() and np.array_equal(got, b.expected("user", USER_IDS[:100])[1])
    assert not (bundle_dir(root, 1) / MANIFEST).exists()
