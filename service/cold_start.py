"""Recommendations for a user the model knows nothing of: the items most liked lately.

A two_tower user vector is built from the rows of the user's ids (user id, attributes, history
items). When none of them has a row (a user first seen after the bundle, with no attribute or
history id the model learnt), the vector is the towers' biases alone: one fixed ranking for
every such user, learnt as the residue of a softmax (with the logQ correction, popularity taken
out), so it ranks items worse than their plain popularity. On a log where most users are new,
as MovieLens replayed in time order (60 of its 81 holdout users), that decides the quality.

So a cold user gets :class:`PopularItems`: the bundle's indexed items ranked by the positive
count of their item-id rows, decayed per pass exactly as eviction's scores are
(``show_click_decay``), so the ranking follows drift; shows break ties (a log without labels).
Computed once per bundle; items that appear live between bundles join at the next one.
``service.cold_start: model`` serves the towers' vector instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Protocol

import numpy as np
from fastapi import Depends, Request

from logrecords.batch import Batch
from models.model_config import ModelConfig, ModelType, Tower
from ps.routing import shard_of
from service.live_rows import LiveRows
from service.vector_index import ItemIndex
from tables.sparse_table import SparseTable

KEEP = 20_000  # ranked items kept per bundle: max_k plus any exclusions fit


@dataclass(frozen=True)
class PopularItems:
    ids: np.ndarray  # uint64, most liked first
    scores: np.ndarray  # float32 decayed positive count (shows when the log has no positives)

    def top(self, k: int, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keep = ~np.isin(self.ids, exclude) if exclude.shape[0] else slice(None)
        return self.ids[keep][:k], self.scores[keep][:k]


class Side(Protocol):
    """What a served side (service.model_store.Side, which holds the popular items) offers here."""

    model: ModelConfig | None
    items: ItemIndex | None
    tables: dict[str, list[SparseTable]]
    popular: PopularItems | None

    def table_of(self, slot: str) -> tuple[str, list[SparseTable]]: ...

    def lookup(self, slot: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class LiveRowsView(Protocol):
    """The service's live rows (service.read_through), as far as telling a known id goes."""

    paused: bool
    overlay: LiveRows


def popular_items(side: Side) -> PopularItems | None:
    """The side's indexed items by decayed positive count; None without a two_tower index."""
    model, items = side.model, side.items
    if model is None or model.type is not ModelType.TWO_TOWER or items is None or items.size == 0:
        return None
    item_slot = next(s for s in model.slots if s.tower is Tower.ITEM)
    shards = side.tables.get(model.table_name(item_slot))
    if not shards:
        return None
    ids = items.pos_ids
    show = np.zeros(ids.shape[0], np.float32)
    click = np.zeros(ids.shape[0], np.float32)
    where = shard_of(ids, len(shards))
    for i, table in enumerate(shards):
        sel = np.flatnonzero(where == i)
        if sel.shape[0]:
            show[sel], click[sel] = table.counts(ids[sel])
    score = click if click.any() else show
    if not score.any():  # no indexed item was ever counted: nothing better than the towers to offer
        return None
    n = min(KEEP, ids.shape[0])
    top = np.argpartition(-score, n - 1)[:n] if n < ids.shape[0] else np.arange(ids.shape[0])
    # by score, then by shows, then by id: a stable order for ties
    order = top[np.lexsort((ids[top], -show[top], -score[top]))]
    return PopularItems(ids[order].copy(), score[order].astype(np.float32))


def is_cold(side: Side, batch: Batch, live: LiveRowsView | None) -> bool:
    """True when no id of the (one-record) ``batch``'s user-tower slots has a row, neither in the
    bundle nor among the live rows changed since."""
    model = side.model
    assert model is not None
    for spec in model.slots:
        if spec.tower is not Tower.USER or spec.name not in batch.slots:
            continue
        values, offsets = batch.slots[spec.name]
        ids = np.ascontiguousarray(values[offsets[0] : offsets[-1]], np.uint64)
        if ids.shape[0] == 0:
            continue
        table, shards = side.table_of(spec.name)
        found = side.lookup(spec.name, ids)[0]
        if found.any():
            return False
        if live is not None and not live.paused:
            # the overlay's memory only: a read-through round trip would cost the request its latency
            held = live.overlay.merge(table, ids, found, np.empty((0, shards[0].width), np.float32))
            if held is not None and held[0].any():
                return False
    return True


class ColdStart:
    """The recommend route's fallback for cold users (``service.cold_start``), and its count."""

    def __init__(self, enabled: bool, live: LiveRowsView | None) -> None:
        self.enabled = enabled
        self.live = live
        self.served = 0  # recommendations answered from the popular items

    def answer(self, side: Side, user: Batch, k: int, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The popular items for a cold ``user``; None when the user is known (or the fallback is off)."""
        if not self.enabled or side.popular is None or not is_cold(side, user, self.live):
            return None
        self.served += 1
        return side.popular.top(k, exclude)


async def cold_start_of(request: Request) -> ColdStart:
    return request.app.state.cold_start


ColdStartDep = Annotated[ColdStart, Depends(cold_start_of)]
