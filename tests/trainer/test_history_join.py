"""The point-in-time history join: a record sees exactly its user's positives strictly
before its event time (never itself, a later record or one at the same time), across batches
and within one, as a slow reference computes it from the whole stream."""

from __future__ import annotations

import numpy as np
import pytest

from logrecords.batch import Batch
from logrecords.schema_config import HistoryConfig, SchemaConfig, SlotConfig, SlotKind
from ps.id_rows_wire import IdRows
from tables.id_rows_table import IdRowsTable, id_rows_config
from trainer.history_join import HISTORY_TABLE, HistoryJoin

CAP = 4


class TableClient:
    """The two PSClient calls the join makes, on one in-process id-rows table."""

    def __init__(self) -> None:
        self.table: IdRowsTable | None = None

    def _t(self, words: int) -> IdRowsTable:
        if self.table is None:
            self.table = IdRowsTable(id_rows_config(HISTORY_TABLE, words))
        return self.table

    def read_id_rows(self, table, keys, *, words):
        return IdRows(*self._t(words).read(keys))

    def write_id_rows(self, table, keys, columns, *, mode, words, ttl_passes=None):
        assert mode == "append"
        self._t(words).append(keys, *columns)

    def wait(self, ticket):
        return ticket


def _schema(**history) -> SchemaConfig:
    slots = (SlotConfig(name="user", kind=SlotKind.SPARSE), SlotConfig(name="item", kind=SlotKind.SPARSE))
    return SchemaConfig(slots=slots, user_id="user", item_id="item", history=HistoryConfig(length=CAP, **history))


def _check(got: list[int], stream: list[int], batch: list[int], users, items, times, labels, i) -> None:
    """Record i's history against a slow reference: its user's positives strictly earlier in time
    among the batch's records and the last CAP of those appended before the batch (the ring),
    newest first, at most CAP (records of equal time may come in either order)."""
    def positive(j: int) -> bool:
        return users[j] == users[i] and users[j] != 0 and labels[j] > 0.5 and items[j] != 0

    ring = [j for j in stream if positive(j)][-CAP:]
    earlier = [j for j in ring + [j for j in batch if positive(j)] if times[j] < times[i]]
    earlier.sort(key=lambda j: -times[j])
    assert len(got) == min(CAP, len(earlier)), i
    assert set(got) <= {int(items[j]) for j in earlier}, i
    assert [times[h - 1] for h in got] == [times[j] for j in earlier[:CAP]], i  # item h is record h - 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_record_sees_only_its_users_earlier_positives(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 600
    users = rng.integers(0, 12, n).astype(np.uint64)  # user 0: no user
    times = np.sort(rng.integers(0, 150, n)).astype(np.float64)  # many ties
    labels = (rng.random(n) < 0.5).astype(np.float32)
    items = np.arange(1, n + 1, dtype=np.uint64)  # item i+1 is record i: any leak would be visible
    items[rng.random(n) < 0.05] = 0
    perm = np.arange(n)
    for a in range(0, n, 50):  # batches in stream order, shuffled inside (a batch is not sorted by time)
        rng.shuffle(perm[a : a + 50])
    join = HistoryJoin(_schema(), TableClient())
    got: dict[int, list[int]] = {}
    appended: list[int] = []  # records in the order the join appends them (by time within a batch)
    for a in range(0, n, 50):
        idx = perm[a : a + 50]
        batch = Batch(labels=labels[idx], dense=np.zeros((idx.size, 0), np.float32), slots={},
                      event_time=times[idx], user_id=users[idx], item_id=items[idx])
        values, offsets = join.join(batch).slots["history"]
        for k, i in enumerate(idx.tolist()):
            got[i] = values[offsets[k] : offsets[k + 1]].tolist()
            _check(got[i], appended, idx.tolist(), users, items, times, labels, i)
            assert int(items[i]) not in got[i] and all(times[h - 1] < times[i] for h in got[i])
        appended += idx[np.argsort(times[idx], kind="stable")].tolist()


def test_own_embeddings_rekey_the_history_ids() -> None:
    schema = _schema(embeddings="own")
    join = HistoryJoin(schema, TableClient())
    batch = Batch(labels=np.ones(2, np.float32), dense=np.zeros((2, 0), np.float32), slots={},
                  event_time=np.array([1.0, 2.0]), user_id=np.array([7, 7], np.uint64),
                  item_id=np.array([(1 << 56) | 5, (1 << 56) | 6], np.uint64))
    values, offsets = join.join(batch).slots["history"]
    assert offsets.tolist() == [0, 0, 1] and values.tolist() == [(schema.history_slot_id() << 56) | 5]
    assert schema.history_slot_id() == 2  # the lowest slot id the record slots leave free


def test_a_replayed_batch_sees_no_label_of_its_own_and_leaves_the_history_as_it_was() -> None:
    client = TableClient()
    join = HistoryJoin(_schema(), client)
    users = np.array([7, 7, 7], np.uint64)
    batch = Batch(labels=np.ones(3, np.float32), dense=np.zeros((3, 0), np.float32), slots={},
                  event_time=np.array([1.0, 2.0, 3.0]), user_id=users, item_id=np.array([11, 12, 13], np.uint64))
    first = join.join(batch).slots["history"]
    assert client.table is not None
    stored = client.table.read(users[:1])[0].copy()
    again = join.join(batch).slots["history"]  # trained again after a rollback: the PS already holds it
    for (v1, o1), (v2, o2) in ((first, again),):
        assert o1.tolist() == o2.tolist() == [0, 0, 1, 3] and v1.tolist() == v2.tolist() == [11, 12, 11]
    np.testing.assert_array_equal(client.table.read(users[:1])[0], stored)


def test_history_freshness_runs_from_the_batch_receipt_to_its_write() -> None:
    """The served history's freshness (trainer status history_freshness_*): receipt of a batch
    with positives -> its positives written; batches without positives or a receipt time add nothing."""
    import time

    join = HistoryJoin(_schema(), TableClient())
    assert join.freshness(0.5) is None

    def batch(labels: list[float], received_at: float | None) -> Batch:
        n = len(labels)
        return Batch(labels=np.array(labels, np.float32), dense=np.zeros((n, 0), np.float32), slots={},
                     event_time=np.arange(1.0, n + 1), user_id=np.full(n, 7, np.uint64),
                     item_id=np.arange(11, 11 + n, dtype=np.uint64), received_at=received_at)

    join.join(batch([0.0, 0.0], time.time() - 100.0))  # no positive: nothing reached the history
    join.join(batch([1.0, 1.0], None))  # file data: no receipt time
    assert join.freshness(0.5) is None
    t0 = time.time()
    join.join(batch([1.0, 0.0], t0 - 3.0))
    assert 3.0 <= join.freshness(0.5) <= 3.0 + (time.time() - t0)
