"""A sparse table's lock, and the part of it the save protocol needs.

``mutex`` guards the table's state; it is re-entrant, and the numba kernels run under it
with the GIL released. A save takes ``one_save`` from its consistent point until its files
are written, so saves run one at a time. While a save's :class:`~tables.snapshot.RowSnapshot`
is open, a push must let it keep the pre-image of every row it changes (``snapshot.protect``),
and whole-table rewrites (eviction, loads) wait until it is closed (``wait_idle``).
"""

from __future__ import annotations

import threading

from tables.snapshot import RowSnapshot


class TableLock:
    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self.idle = threading.Condition(self.mutex)  # notified when a snapshot closes
        self.one_save = threading.Lock()
        self.snapshot: RowSnapshot | None = None

    def open_snapshot(self, snapshot: RowSnapshot) -> None:
        """Under ``mutex``: from now on pushes protect the rows this snapshot holds."""
        self.snapshot = snapshot

    def close_snapshot(self) -> None:
        with self.mutex:
            self.snapshot = None
            self.idle.notify_all()

    def wait_idle(self) -> None:
        """Under ``mutex``: return once no snapshot is open (the mutex is let go meanwhile)."""
        while self.snapshot is not None:
            self.idle.wait()
