"""The point-in-time join of each record with its user's behaviour history.

The history (:class:`logrecords.schema_config.HistoryConfig`) lives in the PS, in the id-rows
table ``ids.history`` (a ring of the last N positive (item id, event time) per user,
:mod:`tables.id_rows_table`), so every worker and the service read the same one and it is saved
and restored with each pass. For one batch, in the order batches are prepared:

1. read the rows of the batch's users (the history as every earlier batch left it);
2. give each record the items of its user that happened strictly before its event time: the
   batch's own positives of that user and the stored ones, newest first, at most N.
   "Strictly": a record never sees itself, a later record, or one at the same time, so the
   label it is trained on cannot leak in, also when a rolled-back or restarted worker trains
   events the PS history already holds;
3. append the batch's positives to the PS, in time order.

The result is the list slot ``history.slot`` of the batch, pooled by the user tower's
EmbeddingBlock like any list slot. Records without a user, or without an event time (then they
count as "now"), get what is stored before that time.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from core.kernel_cache import JIT, kernel
from core.lag_window import LagWindow
from exports.history_table import HISTORY_TABLE, history_words, slot_ids
from logrecords.batch import Batch
from logrecords.schema_config import HistoryConfig, SchemaConfig
from ps.client import PSClient
from ps.cluster import ClusterSpec
from tables.id_rows_kernels import ring_unroll
from tables.id_rows_table import time_bits


@kernel(inline="always", **JIT)
def _in_batch(order: np.ndarray, a: int, p: int, positive: np.ndarray, items: np.ndarray, times: np.ndarray,
              item: np.uint64, t: np.float64) -> bool:
    for q in range(a, p):
        e = order[q]
        if positive[e] and items[e] == item and times[e] == t:
            return True
    return False


@kernel(**JIT)
def point_in_time(user: np.ndarray, times: np.ndarray, positive: np.ndarray, items: np.ndarray,
                  order: np.ndarray, stored_ids: np.ndarray, stored_times: np.ndarray, stored_len: np.ndarray,
                  cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Each record's history strictly before its time, as (values, offsets) in record order.

    ``user[i]``: record i's row in the ``stored_*`` arrays (newest first), -1 for none;
    ``order``: the records sorted by (user, time), stable. A record gets its user's positives
    strictly earlier in time, the batch's and the stored ones merged newest first (on equal
    times the batch's first; a stored entry the batch holds too, a replayed event, once), at
    most ``cap``."""
    n = user.shape[0]
    counts = np.zeros(n, np.int64)
    buf = np.zeros((n, cap), np.uint64)
    a = 0
    while a < n:
        u = user[order[a]]
        b = a
        while b < n and user[order[b]] == u:
            b += 1
        if u >= 0:
            for p in range(a, b):
                r = order[p]
                t = times[r]
                m = 0
                q = p - 1  # the batch's earlier records of this user, newest first ...
                k = 0  # ... merged by time with the stored entries, newest first
                while m < cap:
                    while q >= a and not (positive[order[q]] and times[order[q]] < t):
                        q -= 1
                    while k < stored_len[u] and not stored_times[u, k] < t:
                        k += 1
                    if q >= a and (k >= stored_len[u] or times[order[q]] >= stored_times[u, k]):
                        buf[r, m] = items[order[q]]
                        q -= 1
                    elif k < stored_len[u]:
                        sid, st = stored_ids[u, k], stored_times[u, k]
                        k += 1
                        if _in_batch(order, a, p, positive, items, times, sid, st):
                            continue  # a replayed event: the batch holds it already
                        buf[r, m] = sid
                    else:
                        break
                    m += 1
                counts[r] = m
        a = b
    offsets = np.zeros(n + 1, np.int64)
    for i in range(n):
        offsets[i + 1] = offsets[i] + counts[i]
    values = np.empty(offsets[n], np.uint64)
    for i in range(n):
        values[offsets[i] : offsets[i + 1]] = buf[i, : counts[i]]
    return values, offsets


FRESHNESS_SAMPLES = 1024  # recent batches whose receipt -> PS history lag the quantiles cover


class HistoryJoin:
    """Joins batches with the PS history through its own ``client`` (it runs in the prefetch thread)."""

    def __init__(self, schema: SchemaConfig, client: PSClient) -> None:
        assert schema.history is not None
        self.schema = schema
        self.config: HistoryConfig = schema.history
        self.client = client
        self.words = history_words(schema)
        # receipt of a batch's newest record -> its positives in the PS history, which the service
        # reads live (service.user_history): the served history's freshness, recent batches
        self._lags = LagWindow(FRESHNESS_SAMPLES)

    def join(self, batch: Batch) -> Batch:
        """``batch`` with the history slot added; its positives appended to the PS history."""
        n = len(batch)
        if batch.user_id is None or batch.item_id is None or n == 0:
            return batch
        users, items = batch.user_id, batch.item_id
        times = _times(batch)
        uniq, inv = np.unique(users, return_inverse=True)
        known = uniq != 0
        rows = self.client.wait(self.client.read_id_rows(HISTORY_TABLE, uniq[known], words=self.words)).rows
        stored_ids, stored_times, stored_len = ring_unroll(rows)
        slot_of_uniq = np.full(uniq.shape[0], -1, np.int64)
        slot_of_uniq[known] = np.arange(int(known.sum()))
        user = slot_of_uniq[inv.reshape(-1)]
        positive = (batch.labels > self.config.positive_above) & (items != 0) & (user >= 0)
        order = np.lexsort((times, user))  # by user, then time; stable
        values, offsets = point_in_time(user, times, positive, items, order, stored_ids, stored_times, stored_len,
                                        self.config.length)
        values = slot_ids(self.schema, values)
        self.append(users, items, times, positive)
        if batch.received_at is not None and positive.any():
            self._lags.add((time.time() - batch.received_at,))
        return dataclasses.replace(batch, slots={**batch.slots, self.config.slot: (values, offsets)})

    def freshness(self, q: float) -> float | None:
        """Quantile ``q`` (0..1) of receipt -> history seconds over the recent batches with positives."""
        return self._lags.quantile(q)

    def append(self, users: np.ndarray, items: np.ndarray, times: np.ndarray, positive: np.ndarray) -> None:
        sel = np.flatnonzero(positive)
        if not sel.shape[0]:
            return
        sel = sel[np.argsort(times[sel], kind="stable")]  # each user's entries oldest first
        self.client.wait(self.client.write_id_rows(
            HISTORY_TABLE, users[sel], [items[sel], time_bits(times[sel])], mode="append", words=self.words,
            ttl_passes=self.config.ttl_passes))

    def close(self) -> None:
        self.client.close()


class NoHistory:
    """A schema without ``history``: batches pass unchanged."""

    def join(self, batch: Batch) -> Batch:
        return batch

    def freshness(self, q: float) -> float | None:
        return None

    def close(self) -> None:
        pass


def open_history(schema: SchemaConfig, spec: ClusterSpec) -> HistoryJoin | NoHistory:
    """The job's history join, on a client of its own (the prefetch thread's), or nothing."""
    if schema.history is None:
        return NoHistory()
    return HistoryJoin(schema, PSClient(spec.shard_endpoints, secret=spec.secret(), report_restarts=False))


def _times(batch: Batch) -> np.ndarray:
    now = time.time()
    if batch.event_time is None:
        return np.full(len(batch), now)
    t = np.asarray(batch.event_time, np.float64)
    return np.where(np.isnan(t), now, t)
