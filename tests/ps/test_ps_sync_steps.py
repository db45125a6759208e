"""Sync mode's shard-side bookkeeping, without a network."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import Conflict
from ps.sync_steps import SyncSteps


def test_barrier_opens_once_every_worker_arrived_and_a_resend_counts_once() -> None:
    steps = SyncSteps()
    assert steps.arrive(1, 2, (b"a", 1)) is None
    assert steps.arrive(1, 2, (b"a", 2)) is None  # worker a resent its barrier
    assert steps.arrive(1, 2, (b"b", 3)) == [(b"a", 2), (b"b", 3)]
    with pytest.raises(Conflict, match="workers disagree"):
        steps.arrive(2, 2, (b"a", 4)) or steps.arrive(2, 3, (b"b", 5))


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
