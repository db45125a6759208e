"""The chief's job-control handler (jobcontrol.channel's JobHandler) over a running StreamingJob.

Calls arrive on the control server's thread; anything that touches the model, the PS client
or the consumer is handed to the training loop (``call_in_loop``, :mod:`trainer.loop_calls`) and
runs between steps.
"""

from __future__ import annotations

import logging
from typing import Any

from core.errors import Conflict, CorruptData, InvalidInput, NotFound
from ps.client import PSClient
from trainer import checkpoints, pass_history
from trainer.job import StreamingJob
from trainer.loop_calls import LoopOp

log = logging.getLogger(__name__)


class JobControl:
    def __init__(self, job: StreamingJob) -> None:
        self.job = job
        self._stored: dict[str, Any] | None = None  # the newest stored point, once read
        self._history: tuple[int | None, list[dict[str, Any]]] | None = None  # (last commit's pass, points)

    def status(self) -> dict[str, Any]:
        """The job's status, plus the newest pass's point of the learning curve (``last_point``,
        trainer.pass_history) and the last known figures, also once the stream idles and the
        running pass has none: ``auc`` (the running pass's progressive AUC, else the newest pass's)
        and ``auc_total`` / ``logloss_total`` (cumulative over every record since the job started)."""
        out = self.job.status()
        point = (self.job.committer.last_commit or {}).get("progress") or self._stored_last_point() or {}
        running = (out.get("progressive") or {}).get("auc")
        out["last_point"] = point or None
        out["auc"] = running if running is not None else point.get("auc")
        out["auc_total"] = point.get("auc_total")
        out["logloss_total"] = point.get("logloss_total")
        return out

    def _stored_last_point(self) -> dict[str, Any] | None:
        """Before this process committed a pass (a restart): the newest stored point, read once
        (only this process's commits add points)."""
        if self._stored is None:
            try:
                points = pass_history.read(self.job.root)
            except (CorruptData, OSError):
                points = []
            self._stored = points[-1] if points else {}
        return self._stored or None

    def history(self, since: int = -1) -> dict[str, Any]:
        """Points of the learning curve after pass ``since`` (trainer.pass_history), oldest first.
        The file is read again only after this process committed a pass (dashboards poll this)."""
        key = (self.job.committer.last_commit or {}).get("pass")
        if self._history is None or self._history[0] != key:
            self._history = (key, pass_history.read(self.job.root))
        points = self._history[1]
        return {"since": int(since), "keep": pass_history.KEEP, "points": pass_history.since(points, int(since)),
                "columns": list(pass_history.COLUMNS)}

    def passes(self) -> list[dict[str, Any]]:
        out = []
        for n in checkpoints.complete_passes(self.job.root):
            try:
                man = checkpoints.read_pass(self.job.root, n)
            except Exception as exc:  # a damaged pass is listed as such, not hidden
                out.append({"pass": n, "error": str(exc)})
                continue
            out.append({k: v for k, v in man.items() if k != "files"})
        return out

    def _single_worker(self, what: str) -> None:
        if self.job.spec.num_workers != 1:
            raise Conflict(f"{what} on demand needs a single-worker job (passes end on their own otherwise)")

    def checkpoint(self) -> dict[str, Any]:
        self._single_worker("checkpoint")
        man = self.job.call_in_loop(LoopOp.CHECKPOINT)
        return {k: v for k, v in man.items() if k != "files"}

    def export(self) -> dict[str, Any]:
        return self.job.call_in_loop(LoopOp.EXPORT)

    def shrink(self) -> dict[str, Any]:
        return self.job.call_in_loop(LoopOp.SHRINK)

    def rollback(self, pass_id: int) -> dict[str, Any]:
        self._single_worker("rollback")
        if pass_id not in checkpoints.complete_passes(self.job.root):
            raise NotFound(f"pass {pass_id} is not a complete pass in {self.job.root}")
        return self.job.call_in_loop(LoopOp.ROLLBACK, pass_id=int(pass_id))

    def pause(self) -> dict[str, Any]:
        if not self.job.paused.is_set():
            log.info("training paused by job control")
        self.job.paused.set()
        return {"paused": True}

    def resume(self) -> dict[str, Any]:
        if self.job.paused.is_set():
            log.info("training resumed by job control")
        self.job.paused.clear()
        return {"paused": False}

    def _ps(self) -> PSClient:
        # the control thread gets its own client: PS clients are not thread-safe
        return PSClient(self.job.spec.shard_endpoints, secret=self.job.spec.secret())

    def get_policy(self, table: str) -> dict[str, Any]:
        """The policy in force on the shards (PUT may have changed the YAML's)."""
        self._known(table)
        with self._ps() as ps:
            parts = ps.admin.policy(table)
        return self._merge(parts, applied=False, dry_run=False)

    def put_policy(self, table: str, admission: dict | None, eviction: dict | None, dry_run: bool) -> dict[str, Any]:
        """Validate new settings on every shard, report how many rows the eviction policy would
        remove now, and apply them unless ``dry_run``."""
        self._known(table)
        if admission is None and eviction is None:
            raise InvalidInput("give 'admission' and/or 'eviction' settings")
        with self._ps() as ps:
            if not dry_run:  # validate everywhere first, so no shard is left with half a change
                ps.admin.apply_policy(table, admission=admission, eviction=eviction, dry_run=True)
            parts = ps.admin.apply_policy(table, admission=admission, eviction=eviction, dry_run=dry_run)
        return self._merge(parts, applied=not dry_run, dry_run=dry_run)

    def _known(self, table: str) -> None:
        names = [t.name for t in self.job.model.tables]
        if table not in names:
            raise NotFound(f"no table {table!r} (tables: {names})", detail={"table": table, "tables": names})

    @staticmethod
    def _merge(parts: list[dict[str, Any]], *, applied: bool, dry_run: bool) -> dict[str, Any]:
        first = parts[0]
        return {"table": first["table"], "admission": first["admission"], "eviction": first["eviction"],
                **{k: first[k] for k in ("nonfinite", "show_click_decay", "source") if k in first},
                "would_evict": sum(int(p["would_evict"]) for p in parts),
                "rows": sum(int(p["rows"]) for p in parts), "applied": applied, "dry_run": dry_run}
