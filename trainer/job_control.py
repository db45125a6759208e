"""The chief's job-control handler (trainer.control's JobHandler) over a running StreamingJob.

Calls arrive on the control server's thread; anything that touches the model, the PS client
or the consumer is handed to the training loop (``call_in_loop``) and runs between steps.
"""

from __future__ import annotations

from typing import Any

from tables.errors import Conflict, NotFound
from trainer import checkpoints
from trainer.job import StreamingJob


class JobControl:
    def __init__(self, job: StreamingJob) -> None:
        self.job = job

    def status(self) -> dict[str, Any]:
        return self.job.status()

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
        man = self.job.call_in_loop("checkpoint")
        return {k: v for k, v in man.items() if k != "files"}

    def export(self) -> dict[str, Any]:
        return self.job.call_in_loop("export")

    def shrink(self) -> dict[str, Any]:
        return self.job.call_in_loop("shrink")

    def rollback(self, pass_id: int) -> dict[str, Any]:
        self._single_worker("rollback")
        if pass_id not in checkpoints.complete_passes(self.job.root):
            raise NotFound(f"pass {pass_id} is not a complete pass in {self.job.root}")
        return self.job.call_in_loop("rollback", pass_id=int(pass_id))

    def pause(self) -> dict[str, Any]:
        self.job.paused.set()
        return {"paused": True}

    def resume(self) -> dict[str, Any]:
        self.job.paused.clear()
        return {"paused": False}

    def get_policy(self, table: str) -> dict[str, Any]:
        for t in self.job.model.tables:
            if t.name == table:
                return {"table": table, "admission": t.admission.model_dump(), "eviction": t.eviction.model_dump()}
        raise NotFound(f"no table {table!r} (tables: {[t.name for t in self.job.model.tables]})")

    def put_policy(self, table: str, admission: dict | None, eviction: dict | None, dry_run: bool) -> dict[str, Any]:
        self.get_policy(table)
        raise Conflict("changing admission/eviction policies of a running job is not supported yet; "
                       "restart the job with the new table config")
