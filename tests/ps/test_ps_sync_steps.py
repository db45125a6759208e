"""Sync mode's shard-side bookkeeping, without a network."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import Conflict
from ps.sync_steps import SyncSteps


def test_barrier_opens_once_every_worker_arrived_and_a_repeated_poll_counts_once() -> None:
    steps = SyncSteps()
    assert not steps.arrive(1, 2, "0", 0.0).complete
    waiting = steps.arrive(1, 2, "0", 1.0)  # worker 0 polls again (a reconnect keeps its id)
    assert not waiting.complete and waiting.meta["arrived"] == 1 and waiting.meta["missing"] == [[1, 1.0]]
    done = steps.arrive(1, 2, "1", 2.0)
    assert done.complete and done.release
    steps.released(None, 3)
    assert steps.arrive(1, 2, "0", 3.0).meta == {"step": 1, "applied": 3}  # worker 0 collects the outcome
    assert not steps.arrive(1, 2, "0", 4.0).complete  # then the same step number is a new round
    steps.arrive(2, 2, "0", 5.0)
    with pytest.raises(Conflict, match="workers disagree"):
        steps.arrive(2, 3, "1", 5.0)


def test_a_silent_peer_is_named_with_how_long_it_was_silent() -> None:
    steps = SyncSteps()
    for worker in ("0", "1", "2"):
        steps.arrive(1, 3, worker, 0.0)
    steps.released(None, 0)
    steps.arrive(2, 3, "0", 10.0)
    poll = steps.arrive(2, 3, "1", 50.0)
    assert poll.meta["missing"] == [[2, 50.0]]  # worker 2 last polled at 0


def test_release_merges_pushes_with_and_without_shows() -> None:
    steps = SyncSteps()
    steps.hold_sparse("emb", np.array([1, 2], np.uint64), np.ones((2, 3), np.float32), None, None)
    steps.hold_sparse("emb", np.array([2], np.uint64), np.ones((1, 3), np.float32), np.array([5.0], np.float32),
                      np.array([1.0], np.float32))
    steps.hold_dense("w", np.ones(4, np.float32))
    steps.hold_dense("w", np.ones(4, np.float32))
    held = steps.release()
    keys, grads, shows, clicks = held.sparse["emb"]
    np.testing.assert_array_equal(keys, [1, 2, 2])
    np.testing.assert_array_equal(shows, [1, 1, 5])
    np.testing.assert_array_equal(clicks, [0, 0, 1])
    assert grads.shape == (3, 3)
    np.testing.assert_array_equal(held.dense["w"], 2.0)
    assert held.pushes == 4
    assert steps.release().pushes == 0
