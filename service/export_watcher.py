"""Watches the exports dir and applies new bundles in order (from the newest base on).

Polls every ``poll_seconds`` in its own thread (bundle loads and Faiss work never run on the
event loop); ``poll_once`` is also what POST /admin/reload calls. A rejected bundle is not
retried; the deltas chained to it are rejected too (their parent never became servable)
until a new base arrives. Every poll refreshes the service's marker of the bundles it needs
(exports.retention), so the trainer's retention does not delete them.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from core.errors import NotFound, StreamrecError
from exports.bundle import list_versions, read_manifest
from exports.retention import ServedMarker, marker_name
from service.model_store import ModelStore

log = logging.getLogger("streamrec.service")


class ExportWatcher:
    def __init__(self, store: ModelStore, poll_seconds: float) -> None:
        self.store = store
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="export-watcher", daemon=True)
        self.polls = 0
        self.marker = ServedMarker(store.root, marker_name())

    def start(self) -> ExportWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.marker.remove()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
                self.store.rebuild_index_if_due()
            except Exception:  # a watcher that dies silently would freeze the service's freshness
                log.exception("export watcher poll failed")
            self._stop.wait(self.poll_seconds)

    def pending(self) -> list[int]:
        """Versions to apply now, in order: after the served one, from the newest base on."""
        current = self.store.version
        todo = [v for v in list_versions(self.store.root)
                if (current is None or v > current) and v not in self.store.rejected]
        for i in range(len(todo) - 1, -1, -1):
            try:
                if read_manifest(self.store.root, todo[i]).kind == "base":
                    return todo[i:]
            except (StreamrecError, OSError):
                continue  # apply() will reject it with its error (or skip it, deleted), if it is reached
        return todo

    def poll_once(self) -> dict[str, Any]:
        applied: list[int] = []
        errors: list[dict[str, Any]] = []
        with self._lock:
            self.polls += 1
            pending = self.pending()
            self.marker.refresh([*self.store.pinned(), *pending])  # before the loads: what they need
            for v in pending:
                if self._stop.is_set():
                    break
                try:
                    self.store.apply(v)
                    applied.append(v)
                except StreamrecError as err:
                    if isinstance(err, NotFound) and v not in self.store.rejected:
                        log.info("bundle %d skipped: %s", v, err.message)
                        break  # deleted: the newest base is looked for again at the next poll
                    log.warning("bundle %d rejected: %s", v, err.message)
                    errors.append({"version": v, **err.to_dict()})
                self.marker.refresh(self.store.pinned())
        return {"applied": applied, "rejected": errors, "version": self.store.version}
