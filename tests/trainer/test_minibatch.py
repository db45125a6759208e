"""trainer.minibatch: polls become mini-batches of about batch_size; a poll's offsets are
marked pushed only after the mini-batch holding its last record."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import Conflict
from logrecords.batch import Batch
from streaming.offsets import OffsetTracker
from trainer.minibatch import BACKLOG_GROWTH, MiniBatcher


def poll(first: int, n: int) -> Batch:
    """Records ``first..first+n-1`` of partition 0; the label is the offset (to check order)."""
    labels = np.arange(first, first + n, dtype=np.float32)
    values = np.arange(first, first + n, dtype=np.uint64)
    return Batch(labels=labels, dense=np.zeros((n, 0), np.float32), slots={"s": (values, np.arange(n + 1))},
                 positions={0: (first, first + n - 1)})


def test_a_big_poll_is_split_and_marked_pushed_after_its_last_mini_batch() -> None:
    batcher, tracker = MiniBatcher(256, 10.0), OffsetTracker()
    big = poll(0, 1000)
    tracker.issued(big)
    minis = batcher.add(big)
    assert [len(m.batch) for m in minis] == [250, 250, 250, 250]
    assert all(m.batch.positions == {} for m in minis)
    assert [m.completes for m in minis[:-1]] == [(), (), ()] and minis[-1].completes == (big,)
    assert [m.ends_group for m in minis] == [False, False, False, True]
    np.testing.assert_array_equal(np.concatenate([m.batch.labels for m in minis]), big.labels)
    np.testing.assert_array_equal(np.concatenate([m.batch.slots["s"][0] for m in minis]), big.slots["s"][0])
    for m in minis[:-1]:
        for done in m.completes:
            tracker.mark_pushed(done)
        assert tracker.committable() == {0: 0}  # mini-batches pushed, the poll not yet whole
    tracker.mark_pushed(minis[-1].completes[0])
    assert tracker.committable() == {0: 1000}


def test_small_polls_are_joined_until_size_wait_or_an_empty_poll() -> None:
    now = [0.0]
    batcher, tracker = MiniBatcher(256, 0.5, clock=lambda: now[0]), OffsetTracker()
    polls = [poll(50 * i, 50) for i in range(6)]
    got = []
    for p in polls:
        tracker.issued(p)
        now[0] += 0.05
        got += batcher.add(p)
    assert len(got) == 1 and len(got[0].batch) == 300 and got[0].completes == tuple(polls) and got[0].ends_group
    np.testing.assert_array_equal(got[0].batch.labels, np.arange(300, dtype=np.float32))
    for done in got[0].completes:
        tracker.mark_pushed(done)
    assert tracker.committable() == {0: 300}
    assert batcher.add(poll(300, 10)) == [] and batcher.held == 10
    now[0] += 0.6
    waited = batcher.add(poll(310, 10))  # the first held poll waited 0.6 s > 0.5 s
    assert [len(m.batch) for m in waited] == [20] and batcher.held == 0
    assert batcher.add(poll(320, 5)) == []
    assert [len(m.batch) for m in batcher.add(None)] == [5]  # nothing arrived: the held poll goes now
    assert batcher.add(None) == []


def test_a_mini_batch_across_polls_completes_the_polls_whose_last_record_it_holds() -> None:
    batcher = MiniBatcher(100, 10.0)
    a, b = poll(0, 90), poll(90, 160)
    assert batcher.add(a) == []
    minis = batcher.add(b)  # 250 records: round(2.5) = 2 steps of 125
    assert [len(m.batch) for m in minis] == [125, 125]
    assert minis[0].completes == (a,) and minis[1].completes == (b,)
    tracker = OffsetTracker()
    tracker.issued(a)
    tracker.issued(b)
    tracker.mark_pushed(*minis[0].completes)
    assert tracker.committable() == {0: 90}  # b's first 35 records were pushed, b is not whole yet
    tracker.mark_pushed(*minis[1].completes)
    assert tracker.committable() == {0: 250}
    with pytest.raises(Conflict):
        tracker.mark_pushed(b)  # a poll is marked once


def test_a_caught_up_poll_goes_at_once_and_a_backlog_still_gives_full_steps() -> None:
    # the clock never moves: only the caught-up rule can flush a short group (freshness, #14)
    batcher = MiniBatcher(256, 0.5, clock=lambda: 0.0)
    assert batcher.add(poll(0, 40)) == [] and batcher.held == 40  # more may be waiting in the log
    minis = batcher.add(poll(40, 10), caught_up=True)  # the log's end: nothing to wait for
    assert [len(m.batch) for m in minis] == [50] and minis[0].ends_group and batcher.held == 0
    np.testing.assert_array_equal(minis[0].batch.labels, np.arange(50, dtype=np.float32))
    backlog = [len(m.batch) for m in batcher.add(poll(50, 1024))]  # a full poll from a backlog
    assert backlog == [256, 256, 256, 256] and batcher.held == 0
    caught_up_big = [len(m.batch) for m in batcher.add(poll(1074, 1024), caught_up=True)]
    assert caught_up_big == [256, 256, 256, 256]  # caught up or not, a big poll is split into full steps


def test_steps_grow_only_for_full_polls_of_a_backlog() -> None:
    """A full poll (that many records were waiting) trains as steps of up to BACKLOG_GROWTH x size
    (fewer steps' fixed costs, #14), whether or not it reached the log's end (the steps depend on
    the polls only); a short poll as steps of ``size``; offsets are still marked after the step
    that holds a poll's last record."""
    batcher = MiniBatcher(256, 0.5, poll_size=2048, clock=lambda: 0.0)
    tracker = OffsetTracker()
    sizes = []
    first = 0
    for n in (2048, 2048, 2047, 1024):
        p = poll(first, n)
        tracker.issued(p)
        minis = batcher.add(p)
        sizes.append([len(m.batch) for m in minis])
        for m in minis:
            for done in m.completes:
                tracker.mark_pushed(done)
        first += n
    grown = 256 * BACKLOG_GROWTH
    assert sizes[:2] == [[grown] * (2048 // grown)] * 2
    assert len(sizes[2]) == 8 and set(sizes[2]) <= {255, 256} and sizes[3] == [256] * 4
    assert batcher.grown_steps == 2 * 2048 // grown
    assert tracker.committable() == {0: first}
    caught_up = batcher.add(poll(first, 2048), caught_up=True)  # full, though at the log's end now
    assert [len(m.batch) for m in caught_up] == [grown] * (2048 // grown)
    never = MiniBatcher(256, 0.5, clock=lambda: 0.0)  # no poll size: steps never grow
    assert [len(m.batch) for m in never.add(poll(0, 2048))] == [256] * 8
