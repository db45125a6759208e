"""Client side of the id-rows ops (:mod:`ps.shard_id_rows`): how a write is cut into
per-shard requests, and how read replies become rows in input order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from ps.protocol import Message
from ps.routing import KeyPlan, Where, placement_of, shard_of


class IdRows(NamedTuple):
    """An id-rows read: ``rows`` uint64 (n, words), zeros where ``found`` is false."""

    rows: np.ndarray
    found: np.ndarray


def write_parts(keys: np.ndarray, columns: Sequence[np.ndarray], where: Where,
                max_keys: int) -> Iterator[tuple[int, list[np.ndarray]]]:
    """(shard, [keys, *columns] of its part) per request. Unlike a push nothing is merged: a
    shard gets its keys in input order (a stable sort), repeats kept. A request holds at most
    ``max_keys`` keys' worth of bytes (8 a key): a shard refuses frames bigger than its widest
    table's rows of that many keys, and an id row may be wider than any embedding."""
    row_bytes = 8 + sum(c.dtype.itemsize * (c.shape[1] if c.ndim == 2 else 1) for c in columns)
    max_keys = max(1, max_keys * 8 // row_bytes)
    n_shards = placement_of(where).n_shards
    shards = shard_of(keys, where)
    order = np.argsort(shards, kind="stable")
    bounds = np.searchsorted(shards[order], np.arange(n_shards + 1))
    for s in range(n_shards):
        sel = order[bounds[s] : bounds[s + 1]]
        for a in range(0, sel.shape[0], max_keys):
            part = sel[a : a + max_keys]
            yield s, [np.ascontiguousarray(keys[part]), *(np.ascontiguousarray(c[part]) for c in columns)]


def rows_of(plan: KeyPlan, parts: list[slice], words: int, replies: list[Message]) -> IdRows:
    rows = np.zeros((plan.keys.shape[0], words), np.uint64)
    found = np.zeros(plan.keys.shape[0], np.bool_)
    for sl, reply in zip(parts, replies, strict=True):
        rows[sl] = reply.arrays[0]
        found[sl] = reply.arrays[1].view(np.bool_)
    return IdRows(rows[plan.inverse], found[plan.inverse])
