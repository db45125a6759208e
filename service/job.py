"""The link to the training job's control channel (jobcontrol.channel), if one is configured.

Admin calls go straight through; a background refresher caches the job's status so /metrics
can show training lag and AUC without calling the job on every scrape.

The endpoint is fixed (``job_control``) or read from the ``control.json`` the chief trainer
writes (``job_control_file``) before every call: with leased ranks any trainer may become the
chief, and the link follows it.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from core.errors import StreamrecError, Unavailable
from jobcontrol.channel import ControlClient
from stores.store import read_file


def _find(d: Any, *keys: str) -> float | None:
    """First numeric value under any of ``keys``, at top level or one mapping down."""
    if not isinstance(d, dict):
        return None
    for k in keys:
        if isinstance(d.get(k), int | float) and not isinstance(d.get(k), bool):
            return float(d[k])
    for v in d.values():
        if isinstance(v, dict):
            found = _find({k: v[k] for k in keys if k in v}, *keys)
            if found is not None:
                return found
    return None


class JobLink:
    def __init__(self, endpoint: str | None, timeout_s: float, refresh_s: float = 5.0, *,
                 endpoint_file: str | None = None, secret: bytes | None = None) -> None:
        self.endpoint = endpoint
        self._secret = secret
        self._file = endpoint_file or None  # a path or a URL (s3://...: the checkpoint root's store)
        self._timeout_s = timeout_s
        self._swap = threading.Lock()
        self._client = self._connect(endpoint)
        self._refresh_s = refresh_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-status", daemon=True)
        self.cached_status: dict[str, Any] | None = None
        self.last_error: str | None = None

    def _connect(self, endpoint: str | None) -> ControlClient | None:
        return ControlClient(endpoint, timeout_s=self._timeout_s, secret=self._secret) if endpoint else None

    @property
    def connected(self) -> bool:
        return self._client is not None or self._file is not None

    def _current(self) -> ControlClient | None:
        if self._file is None:
            return self._client
        try:
            endpoint = json.loads(read_file(self._file))["endpoint"]
        except (OSError, StreamrecError, ValueError, KeyError, TypeError):
            endpoint = None  # no chief has published its endpoint yet
        with self._swap:
            if endpoint != self.endpoint:  # a new chief: drop the old one's socket
                if self._client is not None:
                    self._client.close()
                self._client = self._connect(endpoint)
                self.endpoint = endpoint
            return self._client

    def call(self, op: str, **args: Any) -> Any:
        client = self._current()
        if client is None:
            where = f"{self._file} names no endpoint yet" if self._file else "set job_control in the service settings"
            raise Unavailable(f"no training job connected: {where}", detail={"op": op})
        return client.call(op, **args)

    def start(self) -> JobLink:
        if self.connected:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        if self._client is not None:
            self._client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.cached_status = self.call("status")
                self.last_error = None
            except StreamrecError as err:
                self.last_error = err.message
            self._stop.wait(self._refresh_s)

    def training_lag_records(self) -> float | None:
        """Records the job still has to consume, when its status reports them."""
        return _find(self.cached_status, "lag", "consumer_lag", "lag_records")

    def training_lag_seconds(self) -> float | None:
        """How far training is behind the stream: now minus the newest record it trained on."""
        newest = _find(self.cached_status, "newest_record_time")
        return None if newest is None else max(0.0, time.time() - newest)

    def history_freshness(self, q: str) -> float | None:
        """The chief trainer's receipt -> user history seconds at quantile ``q`` ("p50", "p95"):
        how fresh the history is that /v1/recommend reads live (trainer.history_join)."""
        return _find(self.cached_status, f"history_freshness_{q}_s")

    def auc(self) -> float | None:
        """The job's progressive-validation AUC (trainer status: auc, the running pass's, else the
        newest committed pass's; the cumulative one is auc_total, trainer.pass_history)."""
        return _find(self.cached_status, "auc")
