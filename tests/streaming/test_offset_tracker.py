"""The offset rule: a partition's offset is committable only once every earlier record was pushed."""

from __future__ import annotations

import numpy as np
import pytest

from streaming.batch import Batch
from streaming.offsets import OffsetTracker
from tables.errors import Conflict


def span(**parts: tuple[int, int]) -> Batch:
    positions = {int(p.lstrip("p")): s for p, s in parts.items()}
    return Batch(labels=np.zeros(1, np.float32), dense=np.zeros((1, 0), np.float32), slots={}, positions=positions)


def test_out_of_order_push_never_moves_commit_past_an_older_batch() -> None:
    t = OffsetTracker()
    t.start_at({0: 100})
    a, b, c = span(p0=(100, 109)), span(p0=(110, 119)), span(p0=(120, 129))
    for x in (a, b, c):
        t.issued(x)
    assert t.committable() == {0: 100}  # nothing pushed yet: resume where we started
    t.mark_pushed(c)
    t.mark_pushed(b)
    assert t.committable() == {0: 100}  # a (100..109) still in flight
    t.mark_pushed(a)
    assert t.committable() == {0: 130}
    assert t.in_flight() == 0


def test_partitions_are_independent_and_a_batch_may_span_several() -> None:
    t = OffsetTracker()
    first = span(p0=(0, 4), p1=(0, 9))
    second = span(p1=(10, 19), p2=(5, 7))
    t.issued(first)
    t.issued(second)
    t.mark_pushed(second)
    assert t.committable() == {0: 0, 1: 0, 2: 8}
    t.mark_pushed(first)
    assert t.committable() == {0: 5, 1: 20, 2: 8}


def test_gaps_between_batches_are_skipped() -> None:
    # Compacted topics and transaction markers leave offsets that are never delivered.
    t = OffsetTracker()
    a, b = span(p0=(0, 9)), span(p0=(15, 20))
    t.issued(a)
    t.issued(b)
    t.mark_pushed(a)
    assert t.committable() == {0: 15}
    t.mark_pushed(b)
    assert t.committable() == {0: 21}


def test_double_push_and_rewinding_batches_are_conflicts() -> None:
    t = OffsetTracker()
    a = span(p0=(0, 9))
    t.issued(a)
    t.mark_pushed(a)
    with pytest.raises(Conflict, match="not in flight"):
        t.mark_pushed(a)
    with pytest.raises(Conflict, match="before the next unread offset"):
        t.issued(span(p0=(5, 12)))


def test_revoked_partitions_are_forgotten_and_late_pushes_ignored() -> None:
    t = OffsetTracker()
    a = span(p0=(0, 9), p1=(0, 9))
    t.issued(a)
    t.forget([1])
    t.mark_pushed(a)
    assert t.committable() == {0: 10}
