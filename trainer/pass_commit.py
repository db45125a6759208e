"""Committing a pass: every worker's part, two barriers, and the chief's commit in two halves.

At a pass end every worker drains its pushes, merges its dense changes and writes its part
(offsets, dense optimizer state, metrics, records, ``leaving`` when its stream is done), then
meets the others at the first commit barrier; the chief commits; a second barrier releases
everyone. A commit has two halves. The first runs while every worker waits at the commit barrier:
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
After a failure the next save is a base: some shards may have advanced their chain of table
files on a pass that never became complete.

A full disk (trainer.disk_space) does not end the job: a worker whose part cannot be written
waits and tries again (training pauses, nothing past the last complete pass is committed); a
pass whose saves or manifest cannot be written is raised as DiskFull, on which the job goes
back to the last complete pass (trainer.recovery) and trains its records again.

:class:`PassCommitter` runs this protocol for one worker (and, on the chief, owns the finisher
and the exporter the finished passes are handed to).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from core.errors import Conflict, DiskFull, StreamrecError
from exports.item_catalog import ItemCatalog
from models.base import Model
from models.item_popularity import Counts, merge_states
from models.model_config import ModelConfig, ModelType
from ps.admin import SaveMode
from ps.client import PSClient
from ps.ps_config import ClientConfig
from stores.store import Store
from trainer import checkpoints, pass_history
from trainer.dense_sync import Dense
from trainer.disk_space import DiskState, is_disk_full, wait_retry
from trainer.export import SAVE_TIMEOUT_S, Exporter, close_when_done
from trainer.job_context import JobContext
from trainer.metrics import Metrics, WindowedMetrics
from trainer.prior_weight import RecentPositives, Remembered, history_slot_of
from trainer.worker import Worker

# what the chief hands the export of a pass: the dense weights at the snapshot point, the item catalogue,
# the model's config (its dense transforms: the running statistics it trained with) and its latest records
ExportSnapshot = tuple[dict[str, np.ndarray], ItemCatalog | None, ModelConfig, Remembered | None]
log = logging.getLogger(__name__)


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

    @property
    def finished(self) -> bool:
        """The step ended (its outcome waits for :meth:`wait`)."""
        return self._thread is not None and not self._thread.is_alive()

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

    def abandon(self) -> None:
        """A shard was lost: the running step fails alone (it may hang until its timeout), the
        client closed once it ended."""
        close_when_done(self._thread, self.client)


def finish_pass(client: PSClient, root: Store, pass_id: int, saves: list[dict[str, Any]], ranks: list[int], *,
                keep: int, fields: dict[str, Any], disk: DiskState | None = None) -> dict[str, Any]:
    """Commit pass ``pass_id`` once the shards wrote the detached ``saves``: the manifest (with
    ``fields`` and what the worker parts of ``ranks`` say) last, then prune to ``keep``."""
    entries = client.admin.save_wait(saves, timeout_s=SAVE_TIMEOUT_S)
    done = [p for p in checkpoints.complete_passes(root) if p < pass_id]
    previous = checkpoints.read_pass(root, done[-1]) if done else {}
    merged, metrics, lag = _merge_parts(root, pass_id, ranks, previous)
    total = pass_history.cumulative_metrics(root, previous, metrics)  # the learning curve (trainer.pass_history)
    created_at = time.time()
    point = pass_history.make_point(pass_id, created_at=created_at, pass_metrics=merged["metrics"],
                                    total=total.summary(), records_total=merged["records_total"], previous=previous,
                                    lag=lag, newest_record_time=merged["newest_record_time"],
                                    shard_stats=_shard_stats(client))
    extra = {pass_history.TOTAL_METRICS: pass_history.write_total(root, pass_id, total)}
    man = checkpoints.commit_pass(root, pass_id, {"created_at": created_at, **fields, **merged, "progress": point},
                                  ranks=ranks, shard_entries=entries, extra_files=extra)
    pass_history.record(root, point, disk=disk)
    records = merged["records_total"] - int(previous.get("records_total", 0))
    auc = merged["metrics"].get("auc")
    log.info("pass %d committed: %d records (%d in all), auc %s, lag %s records, workers %s", pass_id, records,
             merged["records_total"], "n/a" if auc is None else f"{auc:.4f}", "n/a" if lag is None else lag, ranks,
             extra={"fields": {"pass": pass_id, "records": records, "records_total": merged["records_total"],
                               "auc": auc, "lag": lag, "ranks": ranks}})
    try:
        checkpoints.prune(root, keep)
    except OSError as exc:  # the pass is committed; the next commit prunes again
        log.warning("pass %d: pruning older passes failed: %s", pass_id, exc)
    return man


def job_item_counts(root: Store, pass_id: int, ranks: list[int], model: ModelConfig) -> Counts | None:
    """A two_tower job's decayed item counts of the whole stream: the sum of those in the parts of pass ``pass_id``
    of the workers ``ranks`` (models.item_popularity); None for another model or before any record."""
    if model.type is not ModelType.TWO_TOWER:
        return None
    parts = [checkpoints.read_worker_part(root, pass_id, r)[1] for r in ranks]
    return merge_states(parts, model.retrieval.popularity_half_life_s, prefix="model.popularity.")


def _shard_stats(client: PSClient) -> list[dict[str, Any]] | None:
    """Table rows and bytes for the pass's point; None when a shard does not answer (the commit goes on)."""
    try:
        return client.admin.stats()
    except StreamrecError:
        return None


def _merge_parts(root: Store, pass_id: int, ranks: list[int],
                 previous: dict[str, Any]) -> tuple[dict[str, Any], Metrics, int | None]:
    """Manifest fields merged from the worker parts of ``ranks`` (offsets, metrics, records,
    newest record time), the pass's merged metrics and the workers' consumer lag (None when
    none reported it); partitions of workers that left keep ``previous``'s offsets."""
    offsets: dict[str, int] = dict(previous.get("offsets", {}))
    metrics = Metrics()
    newest, total = None, int(previous.get("records_total", 0))
    lags = []
    for r in ranks:
        info, arrays = checkpoints.read_worker_part(root, pass_id, r)
        if isinstance(info.get("lag"), int):
            lags.append(info["lag"])
        offsets |= info["offsets"]
        metrics.merge(Metrics.from_arrays({k[8:]: v for k, v in arrays.items() if k.startswith("metrics.")}))
        t = info.get("newest_record_time")
        newest = t if newest is None or (t is not None and t > newest) else newest
        total += int(info["records"])
    return ({"offsets": offsets, "metrics": metrics.summary(), "records_total": total, "newest_record_time": newest,
             "active_ranks": checkpoints.staying_ranks(root, pass_id, ranks)}, metrics, sum(lags) if lags else None)


class PassCommitter:
    """Ends passes on this worker and, on the chief, commits them (the module docstring)."""

    def __init__(self, ctx: JobContext, *, model: Model, catalog: ItemCatalog | None,
                 offsets: Callable[[], dict[int, int]],
                 on_committed: Callable[[dict[str, Any]], None] | None = None) -> None:
        """``offsets``: the stream offsets this worker may commit (read once its pushes were drained).
        ``on_committed``: the chief calls it with each pass's manifest once the pass is complete
        (in the finisher thread); its failure is logged, the pass stays committed."""
        self.ctx = ctx
        self.model = model
        self.catalog = catalog
        self.offsets = offsets
        self.on_committed = on_committed
        self.exporter: Exporter | None = None  # the chief's, when passes.export is on (start_exporting)
        self.finisher: CommitFinisher | None = None  # the chief's commits finishing in the background
        self.force_base = False  # the next save starts a new chain of table files
        self.last_commit: dict[str, Any] = {}  # the manifest of the newest pass the chief finished committing
        self.last_export: dict[str, Any] = {}  # what the newest bundle's export returned
        self.served: Dense | None = None  # the chief's dense rule at its last commit: the weights it exports
        self.disk = DiskState()  # writes that failed for want of space (trainer.disk_space)
        self.popularity: Counts | None = None  # the job's decayed item counts the newest bundle carries
        # the latest records with a history: the chief's export weighs the prior on them (trainer.prior_weight)
        self.recent = RecentPositives(history_slot_of(ctx.config.records, ctx.config.model))

    def start_exporting(self) -> None:
        """The chief exports a bundle after each commit when passes.export is on."""
        if self.ctx.chief and self.ctx.config.passes.export:
            self.exporter = self._make_exporter()

    def commit(self, worker: Worker, *, leaving: bool = False) -> None:
        """End the current pass on this worker; the chief commits it. ``leaving``: this worker's
        stream is done; later passes are committed without it."""
        progress = self.ctx.progress
        n = progress.clock.pass_id
        self.ctx.store.drain()
        worker.dense.flush(self.ctx.store)
        offsets = self.offsets()
        arrays = {f"opt.{k}": v for k, v in worker.dense.state().items()}
        arrays |= {f"metrics.{k}": v for k, v in worker.metrics.total.to_arrays().items()}
        arrays |= {f"model.{k}": v for k, v in worker.model.train_state().items()}
        self._write_part(n, arrays, {
            "rank": self.ctx.rank, "offsets": {str(p): o for p, o in offsets.items()}, "records": progress.clock.count,
            "newest_record_time": progress.newest_time, "leaving": leaving, "lag": progress.lag})
        self.ctx.rendezvous.barrier(2 * n, len(progress.active))
        if self.ctx.chief:
            self._commit_as_chief(n, worker)
        self.ctx.rendezvous.barrier(2 * n + 1, len(progress.active))
        if not self.ctx.chief:  # the chief says it once the pass is committed (finish_pass)
            auc = worker.metrics.total.summary()["auc"]
            log.info("pass %d ended: %d records trained here, auc %s", n, progress.clock.count,
                     "n/a" if auc is None else f"{auc:.4f}")
        # from the parts (written before the first barrier): the manifest may not be written yet
        progress.active = checkpoints.staying_ranks(self.ctx.root, n, progress.active)
        worker.dense.refresh(self.ctx.store)
        worker.metrics = WindowedMetrics(self.ctx.config.metric_window)
        progress.at_pass(n)

    def _write_part(self, n: int, arrays: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        """This worker's part of pass ``n``; on a full disk, tried again until it is written (the
        loop, and so training, waits here). DiskFull when the job stops meanwhile."""
        attempt = 0
        while True:
            try:
                checkpoints.write_worker_part(self.ctx.root, n, self.ctx.rank, arrays, info)
            except (OSError, StreamrecError) as exc:
                if not is_disk_full(exc):
                    raise
                self.disk.failed("pass_part", exc)
                if self.ctx.chief and self.finisher is not None and self.finisher.finished:
                    # the pass before may have failed on the full disk: its DiskFull (raised here)
                    # sends the job back to the last complete pass, which frees what it half wrote
                    self.finish_wait()
                if not wait_retry(self.ctx.rendezvous.stopping, attempt):
                    raise DiskFull(f"pass {n}: worker {self.ctx.rank}'s part not written (disk full) "
                                   "before the job stopped") from exc
                attempt += 1
                continue
            self.disk.ok("pass_part")
            return

    def _commit_as_chief(self, n: int, worker: Worker) -> None:
        """The first half of the commit (the workers wait): the shards take the save's
        consistent point; the finisher writes it out and commits (the module docstring)."""
        self.finish_wait()  # one save at a time per shard: the previous commit's, then its export
        self.wait_export()
        k = self.ctx.config.passes.base_every
        self.ctx.client.admin.end_pass()
        evicted = None
        if n % k == 0:
            evicted = sum(sum(e.get("evicted", {}).values()) for e in self.ctx.client.admin.shrink())
        base = n % k == 1 or k == 1 or self.force_base
        try:
            saves = self.ctx.client.admin.save(into=checkpoints.shard_template(self.ctx.root, n),
                                           mode=SaveMode.BASE if base else SaveMode.DELTA,
                                           cursor="checkpoint", timeout_s=SAVE_TIMEOUT_S, detach=True)
        except Exception as exc:
            self.force_base = True  # some shards may have advanced their chain: restart it with a base
            if is_disk_full(exc):
                self.disk.failed("pass", exc)
                raise DiskFull(f"pass {n}: the shards could not start its save: {exc}") from exc
            raise
        restarted = self.ctx.client.take_restart()
        if restarted is not None:  # a reply came from a new incarnation: its save holds what it reloaded
            self.force_base = True
            raise restarted  # no pass is committed on it; the worker regroups
        self.force_base = False
        export = None
        if self.exporter is not None:  # the dense weights of the snapshot point: nobody pushed since
            worker.dense.refresh(self.ctx.store)
            self.served = worker.dense  # model.dense_average: the bundle carries the averaged dense weights
            export = (self.served.served_params(self.model.params),
                      None if self.catalog is None else self.catalog.snapshot(), self.model.config,
                      self.recent.snapshot())
        ranks = list(self.ctx.progress.active)
        if self.finisher is None:
            self.finisher = CommitFinisher(self.background_client())
        self.finisher.start(lambda client: self._finish_commit(client, n, saves, ranks, evicted, export))

    def _finish_commit(self, client: PSClient, n: int, saves: list[dict], ranks: list[int], evicted: int | None,
                       export: ExportSnapshot | None) -> dict[str, Any]:
        """In the finisher thread: the shards' saves written, the manifest last, prune, export."""
        man = finish_pass(client, self.ctx.root, n, saves, ranks, keep=self.ctx.config.passes.keep, fields={
            "evicted": evicted, "workers": self.ctx.spec.num_workers, "mode": self.ctx.spec.mode}, disk=self.disk)
        self.last_commit = man  # status() shows the pass as soon as it exists
        if self.on_committed is not None:
            try:
                self.on_committed(man)
            except StreamrecError as err:  # e.g. the Kafka group's offsets: only for lag tools
                log.warning("pass %d: %s", n, err.message)
        if export is not None and self.exporter is not None:
            dense, catalog, config, recent = export
            self.popularity = job_item_counts(self.ctx.root, n, ranks, self.ctx.config.model)
            self.exporter.start(n, dense=dense, newest_record_time=man["newest_record_time"], catalog=catalog,
                                config=config, popularity=self.popularity, recent=recent)
        return man

    def finish_wait(self, *, ignore_failure: bool = False) -> dict[str, Any]:
        """Wait until the chief's last commit is finished; its manifest becomes ``last_commit``.
        A failure (a shard's save, the manifest) is raised, as DiskFull when the disk is full
        (``ignore_failure``: dropped, e.g. before a rollback); either way the next save is a base."""
        if self.finisher is None:
            return self.last_commit
        try:
            done = self.finisher.wait()
        except Exception as exc:
            self.force_base = True
            full = is_disk_full(exc)
            if full:
                self.disk.failed("pass", exc)
            if ignore_failure:
                return self.last_commit
            if full:
                raise DiskFull(f"a pass could not be saved (disk full): {getattr(exc, 'message', exc)}") from exc
            raise
        if done is not None:
            self.last_commit = done
            self.disk.ok("pass")
        return self.last_commit

    def wait_export(self) -> None:
        """Wait for the bundle being exported, if any; its result becomes ``last_export``."""
        if self.exporter is not None:
            self.last_export = self.exporter.wait() or self.last_export

    def settle(self) -> None:
        """Before the shards load a pass: a pass still committing completes (or not), then its
        export. A failed export is dropped (logged): the load that follows is what counts, and
        the next bundle is a base (:meth:`rebase_exports`)."""
        self.finish_wait(ignore_failure=True)
        if self.exporter is not None:
            try:
                self.last_export = self.exporter.wait() or self.last_export
            except Exception as err:  # e.g. a shard lost under the export: the bundle fails alone
                log.warning("the bundle being exported failed before a load: %s", getattr(err, "message", err))

    def export_now(self) -> dict[str, Any]:
        """A bundle of the newest committed pass, now (job control); returns the export's result."""
        if self.exporter is None:
            raise Conflict("this worker does not export (not the chief, or passes.export is off)")
        self.finish_wait()
        self.exporter.wait()
        dense = self.model.params.as_dict() if self.served is None else self.served.served_params(self.model.params)
        self.exporter.start(self.ctx.progress.pass_id, dense=dense,
                            newest_record_time=self.ctx.progress.newest_time,
                            catalog=None if self.catalog is None else self.catalog.snapshot(),
                            config=self.model.config, popularity=self.popularity, recent=self.recent.snapshot())
        return self.exporter.wait() or {}

    def abandon_commit(self) -> None:
        """A shard was lost: the commit finishing in the background may hang on it until its
        timeout; it fails alone (no manifest) and the next commit, a base, takes over."""
        if self.finisher is not None:
            self.finisher.abandon()
        self.finisher, self.force_base = None, True

    def renew_exporter(self) -> None:
        """A shard was lost: the running export may hang on it; it fails alone (no bundle), a fresh exporter goes on."""
        if self.exporter is not None:
            self.exporter.abandon()
            self.exporter = self._make_exporter()

    def rebase_exports(self) -> None:
        """After a rollback or a regroup: the next bundle is a base, the service drops what came after."""
        if self.exporter is not None:
            self.exporter.exports = 0

    def close(self) -> None:
        """The job stops: the commit still finishing ends (or fails alone), the last bundle goes out."""
        if self.finisher is not None:
            self.finisher.close()
        if self.exporter is not None:
            self.last_export = self.exporter.wait() or self.last_export  # the last pass's bundle is out
            self.exporter.close()

    def _make_exporter(self) -> Exporter:
        return Exporter(self.ctx.config.export_dir, self.background_client(), self.ctx.config.model,
                        base_every=self.ctx.config.passes.base_every, schema=self.ctx.config.records,
                        keep=self.ctx.config.passes.keep_bundles, disk=self.disk)

    def background_client(self) -> PSClient:
        """A client for a background thread (a client is not thread-safe). No resends: a lost shard
        fails the bundle (or the commit) instead of holding the next one. It does not report a
        shard's restart: the training client does, once, and the worker regroups."""
        return PSClient(self.ctx.spec.shard_endpoints, secret=self.ctx.spec.secret(),
                        config=ClientConfig(timeout_s=self.ctx.client.config.timeout_s, retries=0),
                        report_restarts=False)
