"""service.user_history: when the shards miss a live history read (the read-through's timeout),
the bundle's history is served and the shards are asked again only after a back-off, so an
outage does not make every recommend request wait the whole timeout."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from service.model_store import Side
from service.user_history import LIVE_BACKOFF_S, UserHistory

WORDS = 11
LIVE = np.arange(WORDS, dtype=np.uint64).reshape(1, WORDS)


class FakeReadThrough:
    """ReadThrough's history read: rows, or None and ``unavailable`` counted while ``down``."""

    def __init__(self) -> None:
        self.paused = False
        self.down = True
        self.unavailable = 0
        self.calls = 0

    def id_rows(self, table: str, keys: np.ndarray, words: int) -> np.ndarray | None:
        self.calls += 1
        if self.down:
            self.unavailable += 1
            return None
        return LIVE


def test_a_missed_live_read_backs_off_to_the_bundle_then_reads_live_again(tmp_path: Path) -> None:
    now = [100.0]
    rt = FakeReadThrough()
    history = UserHistory(tmp_path, rt, clock=lambda: now[0])
    user = np.array([7], np.uint64)
    side = Side()  # no bundle: its history reads as empty

    assert not history.rows(side, user, WORDS).any()  # missed: the bundle's (none)
    assert (rt.calls, history.live_misses) == (1, 1)
    rt.down = False
    now[0] += LIVE_BACKOFF_S / 2
    assert not history.rows(side, user, WORDS).any()  # backing off: the shards are not asked
    assert rt.calls == 1 and history.bundle_reads == 2
    now[0] += LIVE_BACKOFF_S
    assert (history.rows(side, user, WORDS) == LIVE).all()  # asked again, and they answer
    assert (rt.calls, history.live_reads) == (2, 1)
    assert (history.rows(side, user, WORDS) == LIVE).all()  # no back-off after an answer
    assert rt.calls == 3


def test_a_paused_read_through_is_not_asked(tmp_path: Path) -> None:
    rt = FakeReadThrough()
    rt.paused, rt.down = True, False
    history = UserHistory(tmp_path, rt)
    assert not history.rows(Side(), np.array([7], np.uint64), WORDS).any()
    assert rt.calls == 0 and history.live_misses == 0
