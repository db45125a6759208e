"""Builds real export bundles the way the trainer does: SparseTable saves with cursor "export"
into the staging dir's shard-<i>/sparse/<table>/ (the PS save layout), then exports.bundle.publish.
Keeps the "trainer-side" tables so tests can compare what the service serves with what was exported."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from exports.bundle import BundleManifest, publish, staging_dir, table_dir
from logrecords.batch import Batch
from logrecords.schema_config import HistoryConfig, SchemaConfig, SlotConfig, SlotKind
from models import build_model
from models.model_config import ModelConfig
from ps.routing import shard_of
from service.app import create_app
from service.settings import ServiceSettings
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig

TOKEN = "test-admin-token-5f2b"
USER_IDS = np.arange(1, 2001, dtype=np.uint64) | np.uint64(1 << 56)
ITEM_IDS = np.arange(1, 501, dtype=np.uint64) | np.uint64(2 << 56)


def wait_until(cond, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def make_settings(exports: Path, **kw: object) -> ServiceSettings:
    return ServiceSettings(exports_dir=str(exports), admin_token=TOKEN, poll_seconds=0.05, **kw)


@contextlib.contextmanager
def started(settings: ServiceSettings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="first bundle")
        yield client


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


SMALL_MODEL = {
    "type": "two_tower",
    "slots": [{"name": "user", "dim": 8, "tower": "user"}, {"name": "item", "dim": 16, "tower": "item"}],
    "n_dense": 2, "mlp": [16], "tower_dim": 8, "seed": 3,
}


class BundleBuilder:
    def __init__(self, root: Path, model: dict[str, Any] | None = None, num_shards: int = 2,
                 schema: dict[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.schema = schema  # the record schema the bundles carry (None: as bundles before schemas)
        self.model = ModelConfig.model_validate(model or SMALL_MODEL)
        self.num_shards = num_shards
        self.tables = {c.name: [SparseTable(c) for _ in range(num_shards)] for c in self.model.table_configs()}
        self.dense = build_model(self.model).params.as_dict()
        self.version = 0
        self.rng = np.random.default_rng(7)
        self.known = {name: np.empty(0, np.uint64) for name in self.tables}  # every id pushed per table

    def table_of(self, slot: str) -> str:
        return self.model.table_name(next(s for s in self.model.slots if s.name == slot))

    def push(self, slot: str, ids: np.ndarray) -> None:
        """Create/update rows for ``ids`` (random gradients), routed like the PS does."""
        ids = np.asarray(ids, np.uint64)
        table = self.table_of(slot)
        self.known[table] = np.union1d(self.known[table], ids)
        where = shard_of(ids, self.num_shards)
        for i, t in enumerate(self.tables[table]):
            sel = ids[where == i]
            if sel.shape[0]:
                t.push(sel, self.rng.standard_normal((sel.shape[0], t.width)).astype(np.float32))

    def evict_all_of(self, slot: str, ids: np.ndarray) -> None:
        """Evict exactly ``ids``: push everything else once more, then shrink rows unseen for a pass."""
        ids = np.asarray(ids, np.uint64)
        table = self.table_of(slot)
        known = self.known[table]
        where = shard_of(known, self.num_shards)
        for i, t in enumerate(self.tables[table]):
            t.end_pass()
            keys = known[where == i]
            keep = keys[~np.isin(keys, ids) & t.contains(keys)]
            if keep.shape[0]:
                t.push(keep, np.zeros((keep.shape[0], t.width), np.float32))
            t.shrink(policy=EvictionConfig(ttl_passes=0))

    def expected(self, slot: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, rows) as the trainer-side tables hold them now."""
        ids = np.asarray(ids, np.uint64)
        shards = self.tables[self.table_of(slot)]
        where = shard_of(ids, self.num_shards)
        found = np.zeros(ids.shape[0], bool)
        rows = np.zeros((ids.shape[0], shards[0].width), np.float32)
        for i, t in enumerate(shards):
            sel = np.flatnonzero(where == i)
            hit = t.contains(ids[sel])
            found[sel[hit]] = True
            rows[sel[hit]] = t.pull(ids[sel[hit]])
        return found, rows[found]

    def export(self, kind: str = "base", items: tuple[np.ndarray, np.ndarray] | None = None,
               items_full: bool = True, newest_record_time: float | None = None,
               popularity: tuple[np.ndarray, np.ndarray, float] | None = None,
               popularity_weight: dict | None = None) -> BundleManifest:
        self.version += 1
        stage = staging_dir(self.root, self.version)
        for name, shards in self.tables.items():
            for i, t in enumerate(shards):
                t.save(table_dir(stage / f"shard-{i}", name), mode=kind, cursor="export")
        parent = None if kind == "base" else self.version - 1
        return publish(self.root, version=self.version, kind=kind, parent_version=parent, pass_id=self.version,
                       num_shards=self.num_shards, tables=sorted(self.tables), model=self.model.model_dump(mode="json"),
                       dense=self.dense, items=items, items_full=items_full, newest_record_time=newest_record_time,
                       schema=self.schema, popularity=popularity, popularity_weight=popularity_weight)


def random_items(rng: np.random.Generator, n: int, dim: int, clusters: int = 0) -> tuple[np.ndarray, np.ndarray]:
    ids = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
    ids[: min(n, 3)] = np.array([0, (1 << 64) - 1, 1 << 63], np.uint64)[: min(n, 3)]  # the edges of uint64
    ids = np.unique(ids)
    rng.shuffle(ids)
    if clusters:
        centers = rng.standard_normal((clusters, dim)).astype(np.float32) * 3
        vecs = centers[rng.integers(0, clusters, ids.shape[0])] + rng.standard_normal((ids.shape[0], dim))
    else:
        vecs = rng.standard_normal((ids.shape[0], dim))
    return ids, vecs.astype(np.float32)


# records of slots user and item whose users' histories the trainers keep (trainer.history_join)
HISTORY_SCHEMA = SchemaConfig(slots=(SlotConfig(name="user", kind=SlotKind.SPARSE, slot_id=0),
                                     SlotConfig(name="item", kind=SlotKind.SPARSE, slot_id=1)),
                              user_id="user", item_id="item", history=HistoryConfig(length=5))


def picks(users: np.ndarray, items: np.ndarray, t0: float) -> Batch:
    """Positive records, user ``users[i]`` picking ``items[i]`` at event time ``t0 + i``."""
    n = users.shape[0]
    one = np.arange(n + 1, dtype=np.int64)
    return Batch(labels=np.ones(n, np.float32), dense=np.zeros((n, 0), np.float32),
                 slots={"user": (users, one), "item": (items, one)}, event_time=t0 + np.arange(n, dtype=np.float64),
                 user_id=users, item_id=items)
