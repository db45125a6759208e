"""service.live_rows: the rows changed since the served bundles, in the service's memory, so a
lookup needs no round trip to the shards. The overlay answers for a table only once the older
of the two bundles served last holds every change it may lack (the table's gap), drops what
both bundles hold, and starts over when a shard's tables go back to a save."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.errors import Unavailable
from service.live_rows import LiveRows, RowOverlay
from tables.change_log import Changes

from .service_support import BundleBuilder, wait_until
from .test_live_items import ITEMS, MODEL, SCHEMA, USERS, _live_service

WIDTH = 4


class FakeShards:
    """One shard's table as a dict and its changed-keys log, answering like PSClient (wait is identity)."""

    n_shards = 1

    def __init__(self) -> None:
        self.rows: dict[int, np.ndarray] = {}
        self.log: list[int] = []
        self.generation = 7
        self.active = False

    def push(self, keys: list[int], value: float) -> None:
        for k in keys:
            self.rows[k] = np.full(WIDTH, value, np.float32)
            if self.active:
                self.log.append(k)

    def changes(self, table: str, cursors: list[tuple[int, int]], *, limit: int) -> list[Changes]:
        generation, since = cursors[0]
        first = not self.active
        self.active = True
        lost = first or generation != self.generation
        start = 0 if lost else since
        keys = np.array(self.log[start:start + limit], np.uint64)
        return [Changes(keys, np.full(keys.shape[0], time.time()), self.generation, start + keys.shape[0], lost)]

    def pull_existing(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = np.array([int(k) in self.rows for k in keys], bool)
        rows = np.stack([self.rows.get(int(k), np.zeros(WIDTH, np.float32)) for k in keys]) if keys.size \
            else np.empty((0, WIDTH), np.float32)
        return rows, found

    def wait(self, x: object) -> object:
        return x


def bundle_rows(ids: list[int], value: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ids, found (all), rows of a bundle that holds every id at ``value``."""
    return np.array(ids, np.uint64), np.ones(len(ids), bool), np.full((len(ids), WIDTH), value, np.float32)


def test_the_overlay_answers_once_two_bundles_cover_its_gap_and_drops_what_they_hold() -> None:
    shards, live = FakeShards(), LiveRows()
    shards.push([1, 2, 3], 1.0)  # before the log was read: only bundles can have these
    live.poll(shards, ["t"], limit=100)  # activates the log: the table's gap is now
    mid = time.time()  # bundles whose newest record came here hold 1, 2, 3 but not what follows
    shards.push([2, 9], 2.0)  # 9 is new, not in any bundle
    assert live.poll(shards, ["t"], limit=100) == 2
    ids, found, rows = bundle_rows([1, 2, 9], 1.0)
    found[2] = False  # the bundle lacks 9
    live.bundle_served(1, mid - 3600)  # a bundle from before the gap
    assert live.merge("t", ids, found, rows[found]) is None, "changes before the gap may be missing: read through"
    live.bundle_served(2, mid)
    assert live.merge("t", ids, found, rows[found]) is None, "the older of the two served bundles predates the gap"
    live.bundle_served(3, mid)
    got_found, got_rows = live.merge("t", ids, found, rows[found])
    assert got_found.tolist() == [True, True, True]
    np.testing.assert_array_equal(got_rows[:, 0], [1.0, 2.0, 2.0])  # 2 and 9 from the overlay, 1 from the bundle
    assert live.status()["tables_answered"] == ["t"] and live.status()["rows_held"] == 2
    live.bundle_served(3, time.time())  # the same bundle again: nothing changes
    assert live.status()["rows_held"] == 2
    later = time.time()
    shards.push([3], 5.0)
    live.poll(shards, ["t"], limit=100)
    live.bundle_served(4, later)
    live.bundle_served(5, later)  # both hold 2 and 9 (pulled before their newest record), not 3's change
    assert live.status()["rows_held"] == 1
    got_found, got_rows = live.merge("t", *bundle_rows([2, 3], 1.5))
    np.testing.assert_array_equal(got_rows[:, 0], [1.5, 5.0])  # 2 is the bundle's now; 3 changed after it
    assert live.merge("other", ids, found, rows[found]) is None, "a table not followed is read through"


def test_a_new_generation_drops_the_table_and_reopens_its_gap() -> None:
    shards, live = FakeShards(), LiveRows()
    live.poll(shards, ["t"], limit=100)
    shards.push([4], 1.0)
    live.poll(shards, ["t"], limit=100)
    live.bundle_served(1, time.time())
    live.bundle_served(2, time.time())
    assert live.answers("t")
    shards.generation, shards.log, shards.rows = 8, [], {}  # the shard's tables were loaded from a save
    shards.push([5], 3.0)
    live.poll(shards, ["t"], limit=100)
    assert not live.answers("t") and live.status()["rows_held"] == 1, "only the row pushed since the reload"
    live.bundle_served(3, time.time())
    live.bundle_served(4, time.time())
    assert live.answers("t")


class BusyShards(FakeShards):
    """Its next row pull times out (a loaded shard), after the changes were read."""

    busy = False

    def pull_existing(self, table: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.busy:
            self.busy = False
            raise Unavailable("shard 0 did not answer within 2.0 s")
        return super().pull_existing(table, keys)


def test_changes_whose_row_pull_failed_are_read_again_at_the_next_poll() -> None:
    shards, live = BusyShards(), LiveRows()
    live.poll(shards, ["t"], limit=100)  # activates the log: the table's gap is now
    mid = time.time()  # bundles whose newest record came here lack what follows
    shards.push([4, 6], 2.0)
    shards.busy = True
    with pytest.raises(Unavailable):
        live.poll(shards, ["t"], limit=100)
    assert live.poll(shards, ["t"], limit=100) == 2, "the same changes, not lost with the failed pull"
    live.bundle_served(1, mid)
    live.bundle_served(2, mid)
    _, got_rows = live.merge("t", *bundle_rows([4, 6], 1.0))
    np.testing.assert_array_equal(got_rows[:, 0], [2.0, 2.0])
    assert live.poll(shards, ["t"], limit=100) == 0, "then the cursor moves on"


def test_row_overlay_upserts_grow_and_drop_like_a_dict() -> None:
    rng = np.random.default_rng(3)
    overlay, ref = RowOverlay(WIDTH, capacity=16), {}
    for step in range(30):
        keys = np.unique(rng.integers(0, 500, 40).astype(np.uint64))
        rows = rng.standard_normal((keys.shape[0], WIDTH)).astype(np.float32)
        overlay.upsert(keys, rows, now=float(step))
        ref.update({int(k): (r, float(step)) for k, r in zip(keys, rows, strict=True)})
    assert overlay.drop_before(20.0) == sum(1 for _, t in ref.values() if t < 20.0)
    ref = {k: v for k, v in ref.items() if v[1] >= 20.0}
    query = np.arange(0, 500, dtype=np.uint64)
    at = overlay.find(query)
    assert set(query[at >= 0].tolist()) == set(ref)
    for k, i in zip(query[at >= 0].tolist(), at[at >= 0].tolist(), strict=True):
        np.testing.assert_array_equal(overlay.rows[i], ref[k][0])


@contextlib.contextmanager
def _overlay_answering(tmp_path: Path) -> Iterator[tuple[Any, Any, str, Any, int]]:
    """Real shards and app, the user table's overlay answering: (ps client, test client, table,
    its config, the bundle version served)."""
    b = BundleBuilder(tmp_path / "exports", MODEL, schema=SCHEMA.model_dump(mode="json"))
    b.push("user", USERS)
    b.push("item", ITEMS[:30])
    items = (ITEMS[:30], np.random.default_rng(1).standard_normal((30, 8)).astype(np.float32))
    b.export("base", items=items)
    table = b.table_of("user")
    config = next(c for c in b.model.table_configs() if c.name == table)
    with _live_service(tmp_path, b, config) as (_, ps, client):
        rt, store = client.app.state.read_through, client.app.state.store
        wait_until(lambda: table in rt.overlay.status()["tables_followed"], what="the overlay following the table")
        for _ in range(2):  # two bundles whose newest record came after the overlay's gap
            version = b.export("base", items=items, newest_record_time=time.time()).version
            wait_until(lambda v=version: store.version == v, what=f"bundle {version} served")
        wait_until(lambda: rt.overlay.answers(table), what="the overlay answering for the table")
        yield ps, client, table, config, version


@pytest.mark.process
def test_lookups_read_changed_rows_from_memory_once_the_overlay_answers(tmp_path: Path) -> None:
    """Real shards and app: a row pushed after two bundles that cover the gap is served with no
    read-through round trip (the counter of shard pulls stands still)."""
    with _overlay_answering(tmp_path) as (ps, client, table, config, _):
        rt = client.app.state.read_through
        new_user = np.array([int(USERS[-1]) + 100], np.uint64)
        ps.wait(ps.push(table, new_user, np.full((1, config.width), 0.5, np.float32)))
        want, _ = ps.wait(ps.pull_existing(table, new_user))
        pulls = rt.served

        def served() -> dict:
            return client.post("/v1/embeddings:lookup", json={"slot": "user", "ids": [int(new_user[0])]}).json()

        wait_until(lambda: served()["missing"] == [], what="the new row served")
        np.testing.assert_array_equal(np.array(served()["rows"][0], np.float32), want[0])
        assert rt.served == pulls and rt.from_overlay > 0, "served from memory, no round trip"


@pytest.mark.process
def test_predict_and_recommend_read_the_live_rows_without_a_new_bundle(tmp_path: Path) -> None:
    """Real shards and app: once the overlay answers, a user row trained after the bundle changes
    /v1/predict's score and /v1/recommend's user vector before any new bundle comes."""
    with _overlay_answering(tmp_path) as (ps, client, table, config, version):
        store = client.app.state.store
        user, item = int(USERS[2]), int(ITEMS[3])
        instance = {"instances": [{"slots": {"user": [user], "item": [item]}}]}
        request = {"user": {"slots": {"user": [user]}}, "k": 30}

        def answers() -> tuple[float, list[float]]:
            p = client.post("/v1/predict", json=instance).json()
            r = client.post("/v1/recommend", json=request).json()
            return p["scores"][0], [it["score"] for it in r["items"]]

        before = answers()
        assert answers() == before  # nothing changes by itself
        ps.wait(ps.push(table, np.array([user], np.uint64), np.full((1, config.width), 0.5, np.float32)))
        wait_until(lambda: answers() != before, what="predict and recommend answering with the pushed row")
        score, scores = answers()
        assert score != before[0] and scores != before[1]
        assert store.version == version, "no new bundle was served"
