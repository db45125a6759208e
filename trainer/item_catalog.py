"""The items a two-tower job has seen, with the item-slot ids that describe each one.

The item tower needs an item's features (its ids in the item slots) to compute its vector;
the catalogue keeps the latest seen per item id, and which items were touched since the
last export (a delta bundle upserts only those vectors).
"""

from __future__ import annotations

import numpy as np

from streaming.batch import Batch


class ItemCatalog:
    def __init__(self, item_slots: tuple[str, ...]) -> None:
        self.item_slots = item_slots
        self._features: dict[int, tuple[tuple[int, ...], ...]] = {}
        self._touched: set[int] = set()

    def __len__(self) -> int:
        return len(self._features)

    def observe(self, batch: Batch) -> None:
        if batch.item_id is None:
            return
        ids = batch.item_id
        # the last record of each item in the batch describes it
        _, last = np.unique(ids[::-1], return_index=True)
        rows = ids.shape[0] - 1 - last
        for r in rows.tolist():
            item = int(ids[r])
            if item == 0:
                continue
            self._features[item] = tuple(tuple(batch.slot_ids(s, r).tolist()) if s in batch.slots else ()
                                         for s in self.item_slots)
            self._touched.add(item)

    def all_ids(self) -> np.ndarray:
        return np.fromiter(self._features, np.uint64, len(self._features))

    def touched_ids(self) -> np.ndarray:
        return np.fromiter(self._touched, np.uint64, len(self._touched))

    def snapshot(self) -> ItemCatalog:
        """A copy for the export thread; the touched set starts over here."""
        copy = ItemCatalog(self.item_slots)
        copy._features, copy._touched = dict(self._features), self._touched
        self._touched = set()
        return copy

    def batch_of(self, ids: np.ndarray) -> Batch:
        """A batch of the given items' item-slot features (labels and dense zero)."""
        n = ids.shape[0]
        slots = {}
        for k, s in enumerate(self.item_slots):
            parts = [self._features[int(i)][k] for i in ids.tolist()]
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum([len(p) for p in parts], out=offsets[1:])
            values = np.fromiter((v for p in parts for v in p), np.uint64, int(offsets[-1]))
            slots[s] = (values, offsets)
        return Batch(labels=np.zeros(n, np.float32), dense=np.zeros((n, 0), np.float32), slots=slots,
                     item_id=ids.astype(np.uint64))
