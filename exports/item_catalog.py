"""The job's one item catalogue: every item any trainer saw, with its item-slot ids, in the PS.

The item tower needs an item's features (its ids in the item slots) to compute its vector.
Each trainer puts, after each batch, the item-slot ids of every item the batch holds (its
last record's) into the id-rows table ``ids.items`` on the shards (:mod:`tables.id_rows_table`),
so the catalogue is one for the job, saved, restored and exported with every pass like any
table. The exporter reads the catalogue rows of the bundle's own shard saves
(:func:`read_saved_items`): all of them in a base, those written since the previous bundle in a
delta, so an item any worker saw is in the next bundle's item vectors.

Row layout (uint64 words): per item slot ``[n, id_0 .. id_{K-1}]`` with ``K = ids_per_slot``;
a longer list keeps its first ``K`` ids (an item's slot lists are short: id, category, tags).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.errors import CorruptData
from core.kernel_cache import JIT, kernel
from logrecords.batch import Batch
from models.base import Model
from models.features import build_features
from models.two_tower import as_two_tower, served_dim
from ps.client import PSClient
from stores.store import Store
from tables.id_rows_files import decode_saved_rows

CATALOG_TABLE = "ids.items"
IDS_PER_SLOT = 15


@kernel(**JIT)
def _encode_slot(values: np.ndarray, offsets: np.ndarray, records: np.ndarray, out: np.ndarray, col0: int,
                 k: int) -> None:
    for i in range(records.shape[0]):
        r = records[i]
        a, b = offsets[r], offsets[r + 1]
        n = min(b - a, k)
        out[i, col0] = n
        for j in range(k):
            out[i, col0 + 1 + j] = values[a + j] if j < n else np.uint64(0)


class ItemCatalog:
    """The catalogue's layout for the job's item slots; ``client``: where :meth:`observe` writes
    (the training thread's), None for a copy that only encodes and decodes (the exporter's).
    ``ttl_passes``: the item-id table's eviction ttl; an item unseen that long leaves the
    catalogue at the shards' next shrink as its row leaves the table, so the next base bundle
    neither exports nor indexes it (None: items stay)."""

    def __init__(self, item_slots: tuple[str, ...], *, client: PSClient | None = None,
                 ids_per_slot: int = IDS_PER_SLOT, ttl_passes: int | None = None) -> None:
        self.item_slots = item_slots
        self.client = client
        self.k = ids_per_slot
        self.words = len(item_slots) * (1 + ids_per_slot)
        self.ttl_passes = ttl_passes

    def encode(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """The batch's items (non-zero item ids, each once) and their rows, from each item's last record."""
        if batch.item_id is None or not len(batch):
            return np.empty(0, np.uint64), np.empty((0, self.words), np.uint64)
        ids = batch.item_id
        _, last = np.unique(ids[::-1], return_index=True)
        records = ids.shape[0] - 1 - last
        records = records[ids[records] != 0].astype(np.int64)
        out = np.zeros((records.shape[0], self.words), np.uint64)
        for s, name in enumerate(self.item_slots):
            if name in batch.slots:
                values, offsets = batch.slots[name]
                _encode_slot(values, offsets, records, out, s * (1 + self.k), self.k)
        return ids[records].astype(np.uint64), out

    def observe(self, batch: Batch) -> None:
        """Put the batch's items into the PS catalogue (waited: the pass's save must hold them)."""
        assert self.client is not None, "a catalogue copy without a client cannot write"
        ids, rows = self.encode(batch)
        if ids.shape[0]:
            self.client.wait(self.client.write_id_rows(CATALOG_TABLE, ids, [rows], mode="put", words=self.words,
                                                       ttl_passes=self.ttl_passes))

    def snapshot(self) -> ItemCatalog:
        """What the export thread gets: the layout, no client (it has its own)."""
        return ItemCatalog(self.item_slots, ids_per_slot=self.k)

    def batch_of(self, ids: np.ndarray, rows: np.ndarray) -> Batch:
        """A batch of items ``ids`` with catalogue ``rows`` (labels and dense zero)."""
        n = ids.shape[0]
        slots = {}
        for s, name in enumerate(self.item_slots):
            c0 = s * (1 + self.k)
            lengths = np.minimum(rows[:, c0].astype(np.int64), self.k)
            held = np.arange(self.k) < lengths[:, None]
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            slots[name] = (np.ascontiguousarray(rows[:, c0 + 1 : c0 + 1 + self.k][held]), offsets)
        return Batch(labels=np.zeros(n, np.float32), dense=np.zeros((n, 0), np.float32), slots=slots,
                     item_id=ids.astype(np.uint64))

    def item_vectors(self, model: Model, client: PSClient, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The item tower's vectors of items ``ids`` with catalogue ``rows``: features from the
        catalogue, every table's rows from the shards (the exporter's and the live path's)."""
        if not ids.size:
            return np.zeros((0, served_dim(model.config)), np.float32)
        tower = as_two_tower(model)
        f = build_features(model.config, self.batch_of(ids, rows), tower.item_slots)
        pulled = {t: client.wait(client.pull(t, ti.keys)) for t, ti in f.tables.items()}
        return np.ascontiguousarray(tower.item_vectors(f, pulled), np.float32)

    def read_saved_items(self, store: Store, shard_dirs: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The catalogue rows the shard saves in ``shard_dirs`` (relative to ``store``) hold: ids
        and rows. A shard that never got an item has no catalogue table, hence no rows."""
        ids, rows = [np.empty(0, np.uint64)], [np.empty((0, self.words), np.uint64)]
        for d in shard_dirs:
            rel = f"{d}/sparse/{CATALOG_TABLE}"
            mrel = f"{rel}/{CATALOG_TABLE}.manifest.json"
            if not store.exists(mrel):
                continue
            man = store.read_json(mrel)
            keys, words = decode_saved_rows(store.read_verified(rel, _rows_entry(man, mrel)), man, store.url(rel))
            if words.shape[1] != self.words:
                raise CorruptData(f"{store.url(rel)}: catalogue rows of {words.shape[1]} words, the model's "
                                  f"item slots need {self.words}")
            ids.append(keys)
            rows.append(words)
        return np.concatenate(ids), np.concatenate(rows)


def _rows_entry(man: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        return dict(man["files"]["rows"])
    except (KeyError, TypeError) as exc:
        raise CorruptData(f"{where}: no rows file entry ({exc!r})") from None
