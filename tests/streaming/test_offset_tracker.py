"""The offset rule: a partition's offset is committable only once every earlier record was pushed."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import Conflict
from logrecords.batch import Batch
from streaming.offsets import OffsetTracker


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


def test_a_push_on_a_partition_never_issued_is_a_conflict() -> None:
    t = OffsetTracker()
    t.issued(span(p0=(0, 9)))
    with pytest.raises(Conflict, match="never issued"):
        t.mark_pushed(span(p0=(0, 9), p1=(0, 9)))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=15), st.randoms(use_true_random=False))
def test_committable_never_passes_an_unpushed_record(sizes: list[int], rnd: random.Random) -> None:
    t = OffsetTracker()
    t.start_at({0: 0})
    spans, start = [], 0
    for size in sizes:
        spans.append(span(p0=(start, start + size - 1)))
        start += size
    pushed: set[int] = set()
    order = list(range(len(spans)))
    rnd.shuffle(order)
    issued = 0
    for k in order:
        while issued <= k:  # batches are issued in stream order, pushed in any order
            t.issued(spans[issued])
            issued += 1
        t.mark_pushed(spans[k])
        lo, hi = spans[k].positions[0]
        pushed.update(range(lo, hi + 1))
        commit = t.committable()[0]
        assert all(o in pushed for o in range(commit))  # everything before the commit was pushed
        assert commit == start or commit not in pushed  # and it stops at the first gap
    assert t.committable() == {0: start}
