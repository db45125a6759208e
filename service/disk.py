"""What the service shows of disk space: the exports root's free and used bytes (its own look),
the checkpoint root's and whether training meets a full disk (the chief's status, cached by the
job link), and the bundles retention or a full disk took from under a load.

A full disk is a state to show, not a crash: the service only reads bundles, so it serves the
last one it applied while the trainer waits for space (trainer.disk_space)."""

from __future__ import annotations

from typing import Any

from exports.retention import DiskUsage
from service.job import JobLink
from service.metrics import ServiceMetrics
from service.model_store import ModelStore
from stores.store import open_store


class DiskView:
    def __init__(self, store: ModelStore, job: JobLink) -> None:
        self.store, self.job = store, job
        self.usage = DiskUsage({"export": open_store(store.root)})

    def training(self) -> dict[str, Any]:
        """The chief's disk state from its last status ({} before one arrived)."""
        disk = (self.job.cached_status or {}).get("disk")
        return disk if isinstance(disk, dict) else {}

    def _training_value(self, key: str) -> float | None:
        value = self.training().get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def full(self) -> bool:
        return self.training().get("state") == "full"

    def status(self) -> dict[str, Any]:
        """For /admin/status: ``state`` says "disk full" while the trainer's writes fail."""
        training = self.training()
        return {"state": "disk full" if self.full() else "ok", **self.usage.read(),
                "bundles_vanished": self.store.vanished, "training": training or None}

    def register(self, metrics: ServiceMetrics) -> None:
        metrics.gauge("exports_free_bytes", lambda: self.usage.read()["export_free_bytes"])
        metrics.gauge("exports_bytes", lambda: self.usage.read()["export_bytes"])
        metrics.counter("bundles_vanished", lambda: self.store.vanished)
        metrics.gauge("checkpoints_free_bytes", lambda: self._training_value("checkpoint_free_bytes"))
        metrics.gauge("checkpoints_bytes", lambda: self._training_value("checkpoint_bytes"))
        metrics.gauge("training_disk_full", lambda: float(self.full()) if self.training() else None)
