"""Read-through to the live parameter-server shards: the freshest rows, newer than the last
exported bundle.

Shards answer existing-only pulls (``Flag.EXISTING``): stored rows plus a found mask, so a
read-through never invents a row. When the shards do not answer within the (short) timeout
the lookup serves the bundle's rows and the miss is counted: serving never fails because
training is busy or down. One PS client, used under a lock (clients are not thread-safe).
While ``paused`` (the live path saw the shards' tables go back to a save: a rollback, a
restart, see :mod:`service.live_items`) lookups serve the bundle alone. While the live thread
keeps ``overlay`` (:mod:`service.live_rows`: the rows changed since the served bundles, in
memory) and it answers for a table, lookups of that table read it there, with no round trip.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from core.errors import StreamrecError
from ps.client import PSClient
from ps.ps_config import ClientConfig
from service.live_rows import LiveRows
from service.settings import ReadThroughSettings


class ReadThrough:
    def __init__(self, settings: ReadThroughSettings) -> None:
        secret = Path(settings.secret_file).read_bytes().strip() if settings.secret_file else None
        self._client = PSClient(list(settings.endpoints),
                                config=ClientConfig(timeout_s=settings.timeout_s, retries=0), secret=secret)
        self._lock = threading.Lock()
        self.served = 0  # lookups answered with live rows
        self.unavailable = 0  # lookups that fell back to the bundle
        self.paused = False  # set by the live path until a newer bundle is served
        self.overlay = LiveRows()  # fed by the live thread (service.live_items), when it runs
        self.from_overlay = 0  # lookups answered from the overlay (no round trip)

    def rows(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(rows, found)`` for ``ids`` from the live shards, or None when they did not answer."""
        try:
            with self._lock:
                rows, found = self._client.wait(self._client.pull_existing(table, ids))
        except StreamrecError:
            self.unavailable += 1
            return None
        self.served += 1
        return rows, found

    def id_rows(self, table: str, keys: np.ndarray, words: int) -> np.ndarray | None:
        """Stored rows of id-rows table ``table`` (zeros when absent), or None when the shards did not answer."""
        if self.paused:
            return None
        try:
            with self._lock:
                return self._client.wait(self._client.read_id_rows(table, keys, words=words)).rows
        except StreamrecError:
            self.unavailable += 1
            return None

    def merge(self, table: str, ids: np.ndarray, found: np.ndarray,
              rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bundle's ``(found, rows of found ids)`` overlaid with live rows where shards have them:
        from the overlay when it answers for ``table``, else read through to the shards."""
        if self.paused:
            return found, rows
        held = self.overlay.merge(table, ids, found, rows)
        if held is not None:
            self.from_overlay += 1
            return held
        live = self.rows(table, ids)
        if live is None:
            return found, rows
        live_rows, live_found = live
        full = np.zeros((ids.shape[0], live_rows.shape[1]), np.float32)
        full[found] = rows
        full[live_found] = live_rows[live_found]
        both = found | live_found
        return both, full[both]

    def overlaid(self, table: str, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``rows`` (one per id: the bundle's, or its initializer row) with the overlay's live rows
        where it holds them, when it answers for ``table``. Memory only, never a round trip: the
        model inputs of /v1/recommend and /v1/predict follow the live rows at no latency cost."""
        if self.paused or ids.shape[0] == 0:
            return rows
        held = self.overlay.merge(table, ids, np.ones(ids.shape[0], np.bool_), rows)
        return rows if held is None else held[1]

    def close(self) -> None:
        with self._lock:
            self._client.close()
