"""The second half of a pass commit, finished by the chief in the background.

A commit has two halves. The first runs while every worker waits at the commit barrier:
the chief ends the pass on the shards, shrinks every K passes and asks each shard for a
detached save, which returns as soon as every table took its consistent point (a base is
copy-on-write, so this takes milliseconds, not the seconds of writing the rows). The
workers' offsets and dense optimizer state were written before the barrier and the dense
weights sit on the shards, copied at that point, so the pass is exactly the state at the
barrier. The workers are released then.

The second half runs in a :class:`CommitFinisher` thread with its own PS client (a client
is not thread-safe): wait for every shard's save, write ``pass.json`` LAST with the
checksums, prune, start the export. Until ``pass.json`` exists the pass does not exist:
a chief killed in between restarts from the previous pass. The next commit, a rollback or
an export first waits for the finisher (a shard runs one save at a time), and a failure of
the second half is raised there, on the training thread, like a failed synchronous save.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ps.client import PSClient
from stores.store import Store
from trainer import checkpoints
from trainer.export import SAVE_TIMEOUT_S
from trainer.metrics import Metrics


class CommitFinisher:
    """Runs one finishing step at a time in a thread, handing it a PS client of its own."""

    def __init__(self, client: PSClient) -> None:
        self.client = client
        self._thread: threading.Thread | None = None
        self._result: dict[str, Any] | None = None
        self._error: BaseException | None = None

    def start(self, step: Callable[[PSClient], dict[str, Any]]) -> None:
        """Run ``step(client)`` in the background; the previous step must have been waited for."""
        if self._thread is not None:
            raise RuntimeError("a pass commit is still being finished; wait() for it first")
        self._result, self._error = None, None
        self._thread = threading.Thread(target=self._run, args=(step,), name="commit-finisher", daemon=True)
        self._thread.start()

    def _run(self, step: Callable[[PSClient], dict[str, Any]]) -> None:
        try:
            self._result = step(self.client)
        except BaseException as exc:  # handed to the training thread by wait()
            self._error = exc

    @property
    def running(self) -> bool:
        return self._thread is not None

    def wait(self) -> dict[str, Any] | None:
        """The finished step's result (None when none ran since the last wait); its error is raised here."""
        if self._thread is None:
            return None
        self._thread.join()
        self._thread = None
        result, error, self._result, self._error = self._result, self._error, None, None
        if error is not None:
            raise error
        return result

    def close(self) -> None:
        """Wait for a running step, ignoring its outcome (the job is stopping), and close the client."""
        try:
            with contextlib.suppress(Exception):  # the job failed or stops anyway; that pass stays incomplete
                self.wait()
        finally:
            self.client.close()


def finish_pass(client: PSClient, root: Store, pass_id: int, saves: list[dict[str, Any]], ranks: list[int], *,
                keep: int, fields: dict[str, Any]) -> dict[str, Any]:
    """Commit pass ``pass_id`` once the shards wrote the detached ``saves``: the manifest (with
    ``fields`` and what the worker parts of ``ranks`` say) last, then prune to ``keep``."""
    entries = client.admin.save_wait(saves, timeout_s=SAVE_TIMEOUT_S)
    done = [p for p in checkpoints.complete_passes(root) if p < pass_id]
    previous = checkpoints.read_pass(root, done[-1]) if done else {}
    man = checkpoints.commit_pass(root, pass_id, {"created_at": time.time(), **fields,
                                                 **_merge_parts(root, pass_id, ranks, previous)},
                                  ranks=ranks, shard_entries=entries)
    checkpoints.prune(root, keep)
    return man


def _merge_parts(root: Store, pass_id: int, ranks: list[int], previous: dict[str, Any]) -> dict[str, Any]:
    """Manifest fields merged from the worker parts of ``ranks`` (offsets, metrics, records,
    newest record time); partitions of workers that left keep ``previous``'s offsets."""
    offsets: dict[str, int] = dict(previous.get("offsets", {}))
    metrics = Metrics()
    newest, total = None, int(previous.get("records_total", 0))
    for r in ranks:
        info, arrays = checkpoints.read_worker_part(root, pass_id, r)
        offsets |= info["offsets"]
        metrics.merge(Metrics.from_arrays({k[8:]: v for k, v in arrays.items() if k.startswith("metrics.")}))
        t = info.get("newest_record_time")
        newest = t if newest is None or (t is not None and t > newest) else newest
        total += int(info["records"])
    return {"offsets": offsets, "metrics": metrics.summary(), "records_total": total, "newest_record_time": newest,
            "active_ranks": checkpoints.staying_ranks(root, pass_id, ranks)}
