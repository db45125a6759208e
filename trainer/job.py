"""The streaming training job: Kafka -> prefetch -> worker steps -> pass commits -> bundles.

One process per worker (``streamrec launch ... -- streamrec train --config job.yaml``).
Worker ``r`` of ``W`` reads partitions ``p % W == r``. :class:`StreamingJob` is the step loop
and its lifecycle; the protocols live beside it:

- :mod:`trainer.pass_commit`: at a pass end every worker writes its part (offsets, optimizer
  state, metrics) and meets the others at a barrier; the chief has every shard take the
  consistent point of a save; a second barrier releases everyone and the chief finishes the
  commit in the background (shard saves written, the manifest last, prune, export).
- :mod:`trainer.recovery`: on start the newest complete pass is loaded and every worker seeks
  Kafka to its offsets; a lost shard, a moved membership epoch (leased ranks regroup) or a
  rollback go back to a complete pass the same way, without restarting the processes.
- :mod:`trainer.rendezvous`: the barriers (leased ranks: rendezvous named after the epoch).
- :mod:`trainer.loop_calls`: job-control operations run on the training thread between steps.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from core.errors import ConfigError, DiskFull, NotFound, Unavailable
from core.kernel_cache import load_runtime
from exports.item_catalog import ItemCatalog
from exports.retention import DiskUsage
from models import build_model
from models.model_config import ModelConfig, ModelType
from ps.client import PSClient
from ps.cluster import ClusterSpec
from ps.ps_config import PSConfig, load_ps_config
from stores.store import open_store
from streaming.consumer import FUTURE_SKEW_S
from streaming.group_offsets import GroupOffsets
from trainer import checkpoints
from trainer.history_join import HistoryJoin, NoHistory, open_history
from trainer.job_config import JobConfig
from trainer.job_context import JobContext
from trainer.job_stream import JobStream
from trainer.loop_calls import LoopCalls, LoopOp
from trainer.metrics import WindowedMetrics
from trainer.minibatch import MiniBatch
from trainer.params import PSStore, dense_rule
from trainer.pass_commit import PassCommitter
from trainer.passes import PassProgress
from trainer.prefetch import Prefetcher
from trainer.ps_worker import PSWorker
from trainer.rank_claim import EpochMoved, RankLease
from trainer.recovery import Recovery, dense_optimizer_state, model_train_state
from trainer.rendezvous import Rendezvous
from trainer.worker import Prepared, Worker, check_dense_parts, dense_parts_for, prepare

log = logging.getLogger(__name__)
_END = object()  # the prefetcher ran out: the stream's source ended
RECOVERY_ATTEMPTS = 5  # a recovery met by new losses this many times in a row fails the worker


def _what(err: BaseException) -> str:
    return getattr(err, "message", None) or type(err).__name__


def _check_geo(tables: Any) -> None:
    """Geo mode sends row deltas the shard adds: its tables must use SGD at lr 1 (a plain sum)."""
    from core.errors import ConfigError
    from ps.sync_steps import adds_geo_deltas

    for t in tables:
        for opt in (t.optimizer, t.wide_optimizer if t.wide else t.optimizer):
            if not adds_geo_deltas(opt):
                raise ConfigError(f"geo mode: table {t.name} needs sparse_optimizer (and wide_optimizer) "
                                  "{kind: sgd, lr: 1}; the workers' geo_lr is the learning rate")


class StreamingJob:
    """One worker of the streaming job: the step loop and its lifecycle (the module docstring).

    Passes are committed by a :class:`PassCommitter`, a lost shard or a moved epoch is handled by
    a :class:`Recovery`, and job-control operations are posted to :class:`LoopCalls` and run here
    between two steps.
    """

    def __init__(self, config: JobConfig, spec: ClusterSpec, *, bootstrap: list[str],
                 max_idle_s: float | None = None, max_records: int | None = None,
                 lease: RankLease | None = None) -> None:
        if lease is not None and spec.mode == "sync":
            raise ConfigError("leased ranks (STREAMREC_RANK=auto) need ps mode async or geo: a sync step "
                              "cannot take in a replacement worker")
        self.lease = lease
        self.config = config
        self.spec = spec
        self.rank = spec.rank
        self.chief = spec.rank == 0
        self.bootstrap = bootstrap
        self.max_idle_s = max_idle_s
        self.max_records = max_records
        self.root = open_store(config.checkpoint_dir)  # a path or a URL (s3://...): stores.store
        self.model = build_model(config.model)
        if spec.mode == "geo":
            _check_geo(self.model.tables)
        ps_config = load_ps_config(spec.ps_config) if spec.ps_config else PSConfig()
        self.ps = PSWorker.from_spec(spec, config=ps_config)
        self.client: PSClient = self.ps.client
        self.store = PSStore(self.ps, self.model.params.values,
                             dense_rule=dense_rule(config.dense_update, config.model.dense_optimizer))
        self.paused = threading.Event()
        self.stopping = threading.Event()
        self.records_run = 0  # by this process (the job's total is progress.records_total)
        self.future_records = 0  # records whose event time lay past now + FUTURE_SKEW_S (the stream counts its own)
        self.commit_stall_s: list[float] = []
        tt = self.model.config.type is ModelType.TWO_TOWER
        item_slots = tuple(s.name for s in getattr(self.model, "item_slots", ()))
        # the job's, in the PS; items leave it as their item-id rows leave the table
        self.catalog = ItemCatalog(item_slots, client=self.client,
                                   ttl_passes=_item_ttl(self.model.config, ps_config, config.records.item_id)) \
            if tt else None
        self.history: HistoryJoin | NoHistory = NoHistory()  # run() opens the job's, on a client of its own
        self.worker: Worker | None = None  # made by run() once the shards hold the restored pass
        self.stream: JobStream | None = None  # made by run(), seeked to the restored offsets
        self._peer_look_at = 0.0
        self.progress = PassProgress(config.passes, workers=spec.num_workers)
        self.rendezvous = Rendezvous(self.client, lease, stopping=self.stopping)
        ctx = JobContext(config, spec, root=self.root, client=self.client, store=self.store, progress=self.progress,
                         rendezvous=self.rendezvous)
        # the chief records each committed pass's offsets in the Kafka group too, for lag tools
        # (recovery reads the manifest): streaming.group_offsets
        self.group_offsets = (GroupOffsets(config.kafka, bootstrap, client_id=f"streamrec-trainer-{self.rank}-offsets")
                              if self.chief else None)
        self.committer = PassCommitter(ctx, model=self.model, catalog=self.catalog, offsets=self._committable_offsets,
                                       on_committed=None if self.group_offsets is None else self._commit_to_group)
        self.recovery = Recovery(ctx, self.committer)
        roots = {"checkpoint": self.root} | ({"export": open_store(config.export_dir)} if config.passes.export else {})
        self.disk_usage = DiskUsage(roots)
        self._lost: BaseException | None = None  # met by a job-control call: the loop recovers from it
        self.loop_calls = LoopCalls({op: self._noting_loss(fn) for op, fn in (
            (LoopOp.CHECKPOINT, self._checkpoint), (LoopOp.EXPORT, self.committer.export_now),
            (LoopOp.SHRINK, self._shrink), (LoopOp.ROLLBACK, self._rollback))})

    # ------------------------------------------------------------------ setup
    def _start(self) -> None:
        restored = self.recovery.start()
        sync_steps = 1 if self.spec.mode == "sync" else self.config.dense_sync_steps
        parts = dense_parts_for(self.config.dense_parts, workers=self.spec.num_workers, mode=self.spec.mode,
                                model=self.model)
        check_dense_parts(parts, self.spec.mode)
        self.worker = Worker(self.model, self.store, metrics=WindowedMetrics(self.config.metric_window),
                             dense_sync_steps=sync_steps, dense_update=self.config.dense_update,
                             steps_per_batch=self.config.steps_per_batch, dense_parts=parts)
        opt_state = dense_optimizer_state(restored.worker_arrays)
        if opt_state:
            self.worker.dense.load_state(opt_state)
        self.model.load_train_state(model_train_state(restored.worker_arrays))
        self.progress.records_total = restored.records_total
        self.progress.at_pass(restored.pass_id)
        self.stream = JobStream(self.config, self.spec, self.bootstrap, progress=self.progress,
                                stopping=self.stopping, offsets=restored.offsets)
        self.committer.start_exporting()

    def _commit_to_group(self, manifest: dict[str, Any]) -> None:
        """In the chief's commit finisher: the complete pass's offsets, every partition's."""
        assert self.group_offsets is not None
        self.group_offsets.commit({int(p): int(o) for p, o in manifest.get("offsets", {}).items()})

    def _committable_offsets(self) -> dict[int, int]:
        assert self.stream is not None
        return self.stream.committable()

    # ------------------------------------------------------------------- loop
    def run(self) -> dict[str, Any]:
        """Train until the stream ends or the job stops; returns :meth:`status`. A fatal error is
        logged with its traceback before it propagates (the CLI prints only its message)."""
        try:
            return self._run()
        except Exception:
            log.exception("worker %d stops on a fatal error", self.rank)
            raise

    def _run(self) -> dict[str, Any]:
        load_runtime()  # numba's registries, before the stream's threads call kernels (no scipy.linalg)
        self._start()
        assert self.worker is not None and self.stream is not None
        stream = self.stream
        pull_client = None
        if self.spec.mode == "async" and self.config.prefetch_pull and self.model.prefetch_rows:
            # its pulls only prefetch: the training client's waits report a shard restart
            pull_client = PSClient(self.spec.shard_endpoints, secret=self.spec.secret(), report_restarts=False)
        pull = None if pull_client is None else lambda t, k: pull_client.wait(pull_client.pull(t, k))
        # each batch joined with its users' history
        history = self.history = open_history(self.config.records, self.spec)
        idle_since = time.monotonic()
        try:
            while not self.stopping.is_set():  # once, unless a rollback re-seeks the stream
                self.progress.reseek = None
                items = Prefetcher(stream.minibatches(),
                                   lambda m: None if m is None else (prepare(self.model, history.join(m.batch), pull),
                                                                     m), depth=2)
                try:
                    idle_since = self._loop(items, idle_since)
                finally:
                    # until its thread ended: a thread left inside a pull would share pull_client and the
                    # history's client with the next generation's thread (zmq sockets are not thread-safe:
                    # "Socket operation on non-socket" under a regroup with a stopped shard), or be closed under
                    items.close(timeout=None)
                if self.progress.reseek is None:
                    break
                stream.seek(self.progress.reseek)
            self.committer.finish_wait()  # the last pass is complete (or its failure raised) before the job reports
        finally:
            self.stopping.set()
            if pull_client is not None:
                pull_client.close()
            history.close()
            self.committer.close()
            if self.group_offsets is not None:
                self.group_offsets.close()
            stream.close()
        return self.status()

    def _loop(self, items: Prefetcher, idle_since: float) -> float:
        """Train until the stream ends, the job stops or the stream must be re-seeked; returns
        when the stream was last not idle. A lost shard or a moved epoch is met here wherever
        it shows: taking the next batch (its prefetched pull), a step, a commit, a job-control
        call (see :meth:`_recover`)."""
        assert self.worker is not None
        batches = iter(items)
        while True:
            try:
                item = next(batches, _END)
                if item is _END:
                    return idle_since
                self._serve_calls()
                if self.progress.reseek is not None:
                    return time.monotonic()
                # idle means no record since idle_since: a batch that arrives late (a slow start on a
                # busy machine) is trained, not taken for the end of the stream
                done = (self.max_records is not None and self.records_run >= self.max_records) or (
                    item is None and self.max_idle_s is not None and time.monotonic() - idle_since >= self.max_idle_s)
                # the chief stays while others train: it commits their passes
                active = self.progress.active
                leaving = done and (not self.chief or active == [self.rank])
                if self.rendezvous.epoch_moved():
                    raise EpochMoved
                if item is not None:
                    self._train(item)
                    idle_since = time.monotonic()
                # a pass ends where no poll is partly trained, so its offsets are exactly its records:
                # a due one, and one a peer ended (the rest of the group is already batched); in sync
                # mode a peer's at once, since each step waits for every worker
                at_poll_end = item is None or item[1].ends_group
                peer = self._peer_committing()
                if ((self.progress.clock.due() or peer) and at_poll_end) or (peer and self.spec.mode == "sync") or (
                        leaving and (self.progress.clock.count or len(active) > 1)):
                    self.commit(leaving=leaving)
                    if not leaving:  # a commit's stall (slower on an object store) is not idleness of the stream
                        idle_since = time.monotonic()
            except (EpochMoved, NotFound, Unavailable) as err:
                self._recover(err)
                return time.monotonic()  # the wait for the shard is not idleness of the stream
            if leaving or self.rank not in self.progress.active:
                self.stopping.set()
            if self.stopping.is_set():
                return idle_since

    def _serve_calls(self) -> None:
        """Job-control operations, also while paused; one that met a lost shard (its caller got
        the error) leaves the recovery to the loop: the restart was reported to it only."""
        self.loop_calls.serve()
        while self.paused.is_set() and not self.stopping.is_set():
            time.sleep(0.05)
            self.loop_calls.serve()
        lost, self._lost = self._lost, None
        if lost is not None:
            raise lost

    def _recover(self, err: BaseException) -> None:
        """Back to the newest complete pass after ``err`` (a moved epoch, a lost or restarted
        shard), in this process. A shard that restarts (again) during the recovery starts it
        over; only fixed ranks with several workers fail the job (every worker restarts)."""
        assert self.worker is not None
        for attempt in range(RECOVERY_ATTEMPTS):
            try:
                if isinstance(err, DiskFull):
                    if self.stopping.is_set():
                        raise err  # stopping with a pass not saved: the restart resumes from the last one
                    self.recovery.disk_full(self.worker, err)
                elif isinstance(err, EpochMoved):
                    self.recovery.regroup(self.worker, shard_lost=self.rendezvous.new_lease_table())
                elif self.lease is None and self.spec.num_workers != 1:
                    raise err  # several workers: the job fails and is restarted, every worker from the last pass
                else:
                    self.recovery.shard_lost(self.worker)  # leased ranks regroup, a single worker reloads
                return
            except (EpochMoved, NotFound, Unavailable) as again:
                if again is err or self.stopping.is_set() or attempt == RECOVERY_ATTEMPTS - 1:
                    raise
                log.warning("worker %d: %s during the recovery from %s; starting it over", self.rank,
                            _what(again), _what(err))
                err = again

    def _peer_committing(self) -> bool:
        """Another worker ended this pass (its part is written): end it here too, so every
        worker meets at the commit barrier whether or not its own clock is due."""
        active = self.progress.active
        if len(active) == 1:
            return False
        if self.root.local is None:  # an object store: a request per look, so look twice a second at most
            now = time.monotonic()
            if now < self._peer_look_at:
                return False
            self._peer_look_at = now + 0.5
        pass_id = self.progress.clock.pass_id
        return any(checkpoints.has_worker_part(self.root, pass_id, r) for r in active if r != self.rank)

    def _train(self, item: tuple[Prepared, MiniBatch]) -> None:
        assert self.worker is not None and self.stream is not None
        prepared, mini = item
        batch = prepared.batch
        self.client.received_at = batch.received_at  # the shards' change logs count freshness from receipt
        self.worker.step(prepared)
        # pushes of this batch are in flight; drain() precedes every offset checkpoint
        self.stream.mark_pushed(mini.completes)
        n = len(batch)
        self.progress.clock.add(n)
        self.records_run += n
        self.progress.records_total += n
        t = batch.received_at  # the consumer takes a receipt time in the future as now
        if t is None and batch.event_time is not None and batch.event_time.size:
            t, ahead = newest_time(batch.event_time, limit=time.time() + FUTURE_SKEW_S)
            self.future_records += ahead
        if t is not None:
            newest = self.progress.newest_time
            self.progress.newest_time = t if newest is None else max(newest, t)
        self.worker.model.count_items(batch)  # the decayed item counts a bundle carries (models.item_popularity)
        if self.committer.exporter is not None:  # what the export weighs the prior on (trainer.prior_weight)
            self.committer.recent.observe(batch)
        if self.catalog is not None:
            self.catalog.observe(batch)

    def commit(self, *, leaving: bool = False) -> dict[str, Any]:
        """End the current pass on this worker; the chief commits it (trainer.pass_commit).
        ``leaving``: this worker's stream is done; later passes are committed without it.
        Returns the manifest of the newest pass the chief finished committing (the chief's
        commit of this pass may still be finishing in the background)."""
        assert self.worker is not None and self.stream is not None
        t0 = time.monotonic()
        pass_id, others = self.progress.clock.pass_id, [r for r in self.progress.active if r != self.rank]
        self.committer.commit(self.worker, leaving=leaving)
        self.commit_stall_s.append(time.monotonic() - t0)
        # the job's total counts every worker's records: the others' parts were written before the commit barrier
        self.progress.records_total += sum(int(self.root.read_json(f"{checkpoints.pass_name(pass_id)}/worker-{r}.json")
                                               ["records"]) for r in others)
        return self.committer.last_commit

    # ---------------------------------------------------------------- control
    def call_in_loop(self, op: LoopOp, **args: Any) -> Any:
        """Run ``op`` on the training thread between steps (thread-safe entry for the control server)."""
        return self.loop_calls.call(op, **args)

    def _noting_loss(self, op: Callable[..., Any]) -> Callable[..., Any]:
        """``op`` on the training thread; a lost or restarted shard it meets goes to its caller
        and, as the client reports a restart once, to the loop too (:meth:`_serve_calls`)."""
        @functools.wraps(op)
        def noted(**args: Any) -> Any:
            try:
                return op(**args)
            except (EpochMoved, NotFound, Unavailable) as err:
                self._lost = err
                raise
        return noted

    def _checkpoint(self) -> dict[str, Any]:
        self.commit()
        return self.committer.finish_wait()  # asked for a checkpoint: answered when it is complete

    def _rollback(self, pass_id: int) -> dict[str, Any]:
        assert self.worker is not None
        return self.recovery.rollback(self.worker, pass_id)

    def _shrink(self) -> dict[str, Any]:
        return {"evicted": [e.get("evicted", {}) for e in self.client.admin.shrink()]}

    def status(self) -> dict[str, Any]:
        w = self.worker
        lag = {} if self.stream is None else dict(self.stream.lag_partitions)
        progress, committer = self.progress, self.committer
        return {"rank": self.rank, "pass": progress.pass_id, "records_run": self.records_run,
                "records_total": progress.records_total, "paused": self.paused.is_set(), "mode": self.spec.mode,
                "progressive": None if w is None else w.metrics.summary(),
                "phase_seconds": {} if w is None else dict(w.phase_seconds),
                "newest_record_time": progress.newest_time, "recoveries": self.recovery.recoveries,
                "future_records": self.future_records + (0 if self.stream is None else self.stream.future_records),
                # refused records by reason, and records lacking a required field (logrecords.absent_fields)
                "rejected": {} if self.stream is None else self.stream.rejected,
                "absent_fields": {} if self.stream is None else self.stream.absent_fields,
                # receipt -> the batch's positives in the PS user history, which the service reads live
                "history_freshness_p50_s": self.history.freshness(0.5),
                "history_freshness_p95_s": self.history.freshness(0.95),
                "regroups": self.recovery.regroups,
                # records not yet consumed on this worker's partitions (rank 0's when asked through job control)
                "lag": sum(lag.values()), "lag_partitions": lag,
                "commit_stall_s": list(self.commit_stall_s[-20:]),
                # an idle pass commits nothing: the last look that found no record (trainer.passes)
                "heartbeat": {"idle_checks": progress.clock.idle_checks, "idle_at": progress.clock.idle_at,
                              "pass_records": progress.clock.count},
                "last_commit": {k: v for k, v in committer.last_commit.items() if k != "files"},
                "last_export": committer.last_export,
                # writes failed for want of space, and the roots' free and used bytes (trainer.disk_space)
                "disk": {**committer.disk.status(), **self.disk_usage.read(),
                         "recoveries": self.recovery.disk_recoveries,
                         "bundles_retired": 0 if committer.exporter is None else committer.exporter.retired,
                         "retention_failures": 0 if committer.exporter is None
                         else committer.exporter.retention_failures}}


def newest_time(times: np.ndarray, *, limit: float) -> tuple[float | None, int]:
    """The newest of a batch's event times, at most ``limit`` (now + the allowed skew), and how
    many lay past it: one far in the future would hold the freshness figures (a running max) at
    zero until it passed. None when no time is finite."""
    if not np.isfinite(times).any():
        return None, 0
    t = float(np.nanmax(times))
    if t <= limit:
        return t, 0
    return limit, int(np.count_nonzero(times > limit))


def _item_ttl(model: ModelConfig, ps_config: PSConfig, item_field: str | None) -> int | None:
    """The eviction ttl (passes) of the table holding the item-id slot's rows, if it has one."""
    spec = next((s for s in model.slots if s.name == item_field), None)
    if spec is None:
        return None
    name = model.table_name(spec)
    table = next((t for t in ps_config.tables if t.name == name), None)
    return None if table is None else table.eviction.ttl_passes
