"""The streaming training job: Kafka -> prefetch -> worker steps -> pass commits -> bundles.

One process per worker (``streamrec launch ... -- streamrec train --config job.yaml``).
Worker ``r`` of ``W`` reads partitions ``p % W == r``. At a pass end every worker drains
its pushes, merges its dense changes and writes its part (offsets, optimizer state,
metrics); at a PS barrier the chief (rank 0) shrinks every K passes and has every shard
take the consistent point of a save into the pass directory; a second barrier releases
everyone, and the chief finishes the commit in the background (shard saves written, the
manifest last, prune, export: :mod:`trainer.pass_commit`). On start the newest complete
pass is loaded (:mod:`trainer.recovery`) and every worker seeks Kafka to its offsets.

Leased ranks (``STREAMREC_RANK=auto``, :mod:`trainer.rank_claim`): the barriers are
rendezvous on shard 0 named after the membership epoch, so a dead worker's arrival never
counts later. When the epoch moves (a replacement took a dead worker's rank, or a shard
lost its tables) every worker *regroups*: all meet, the chief reloads the newest complete
pass into the shards, everyone re-seeks to its offsets and goes on, as if the whole job had
restarted but without restarting the processes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np
from kafka.errors import KafkaError

from core.errors import ConfigError, NotFound, Unavailable
from models import build_model
from models.model_config import ModelType
from ps.admin import SaveMode
from ps.client import PSClient
from ps.cluster import ClusterSpec
from ps.ps_config import ClientConfig, PSConfig, load_ps_config
from stores.store import open_store
from streaming.consumer import Membership, StreamConsumer
from trainer import checkpoints
from trainer.export import SAVE_TIMEOUT_S, Exporter
from trainer.item_catalog import ItemCatalog
from trainer.job_config import JobConfig
from trainer.metrics import WindowedMetrics
from trainer.params import PSStore, dense_rule
from trainer.pass_commit import CommitFinisher, finish_pass
from trainer.passes import PassClock
from trainer.prefetch import Prefetcher
from trainer.ps_worker import PSWorker
from trainer.rank_claim import EpochMoved, RankLease
from trainer.recovery import Restored, restore
from trainer.worker import Prepared, Worker, prepare

_TAG = 1 << 41  # barrier ids of pass commits and restores: far above any step number


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
    def __init__(self, config: JobConfig, spec: ClusterSpec, *, bootstrap: list[str],
                 max_idle_s: float | None = None, max_records: int | None = None,
                 lease: RankLease | None = None) -> None:
        if lease is not None and spec.mode == "sync":
            raise ConfigError("leased ranks (STREAMREC_RANK=auto) need ps mode async or geo: a sync step "
                              "cannot take in a replacement worker")
        self.lease = lease
        self.epoch = lease.epoch if lease is not None else ""
        self.regroups = 0
        self.config = config
        self.spec = spec
        self.rank = spec.rank
        self.chief = spec.rank == 0
        self.bootstrap = bootstrap
        self.max_idle_s = max_idle_s
        self.max_records = max_records
        self.root = open_store(config.checkpoint_dir)  # a path or a URL (s3://...): stores.store
        self._peer_look_at = 0.0
        self.model = build_model(config.model)
        if spec.mode == "geo":
            _check_geo(self.model.tables)
        ps_config = load_ps_config(spec.ps_config) if spec.ps_config else PSConfig()
        self.ps = PSWorker.from_spec(spec, config=ps_config)
        self.client: PSClient = self.ps.client
        self.store = PSStore(self.ps, self.model.params.values,
                             dense_rule=dense_rule(config.dense_update, config.model.dense_optimizer))
        self.lock = threading.RLock()  # the consumer and its offset tracker, shared with the prefetch thread
        self.paused = threading.Event()
        self.requests: list[tuple[str, dict[str, Any], Any]] = []  # control ops run by the main loop
        self.stopping = threading.Event()
        self.records_run = 0
        self.records_total = 0
        self.newest_time: float | None = None
        self.last_commit: dict[str, Any] = {}
        self.commit_stall_s: list[float] = []
        self.force_base = False
        tt = self.model.config.type is ModelType.TWO_TOWER
        item_slots = tuple(s.name for s in getattr(self.model, "item_slots", ()))
        self.catalog = ItemCatalog(item_slots) if tt else None
        self.exporter: Exporter | None = None
        self.finisher: CommitFinisher | None = None  # the chief's commits finishing in the background
        self.worker: Worker | None = None
        self.consumer: StreamConsumer | None = None
        self.lag_partitions: dict[int, int] = {}  # this worker's partitions, refreshed ~1/s by the poll loop
        self._lag_at = 0.0
        self.reseek: dict[int, int] | None = None
        self.active = list(range(spec.num_workers))  # ranks still training (a worker whose stream ended leaves)
        self.recoveries = 0
        self.last_export: dict[str, Any] = {}

    # ------------------------------------------------------------------ setup
    def _barrier(self, tag: int) -> None:
        if self.lease is not None:
            self._meet(f"pass-{tag}", len(self.active))
            return
        self.client.barrier(_TAG + tag, len(self.active), timeout_s=600.0)

    def _meet(self, name: str, workers: int) -> None:
        """Leased ranks: the rendezvous ``name`` of this epoch on shard 0 (raises EpochMoved)."""
        assert self.lease is not None
        self.lease.meet(name, workers, epoch=self.epoch, stopping=self.stopping)

    def _meet_and_restore(self) -> Restored:
        """Leased ranks: every worker meets; the chief loads the newest complete pass into the
        shards between two meetings, so nobody pulls or pushes while it loads."""
        assert self.lease is not None
        while True:
            self.epoch = self.lease.epoch
            try:
                self._meet("stopped", self.spec.num_workers)
                if self.chief:
                    restore(self.root, self.client, rank=self.rank, chief=True)
                self._meet("loaded", self.spec.num_workers)
            except EpochMoved:
                continue
            return restore(self.root, self.client, rank=self.rank, chief=False)

    def _new_lease_table(self) -> bool:
        """Shard 0 restarted: its lease table is new (the table's nonce leads the epoch)."""
        assert self.lease is not None
        return self.lease.epoch.split(".")[0] != self.epoch.split(".")[0]

    def _regroup(self, *, shard_lost: bool) -> None:
        """The epoch moved: back to the newest complete pass with every worker (module docstring).
        ``shard_lost``: a shard restarted (or shard 0, whose table is new), so the chief's commit
        finishing in the background and its export may hang on it until their timeouts: they
        fail alone (no manifest, no bundle) and fresh ones take over."""
        assert self.worker is not None and self.lease is not None
        with contextlib.suppress(NotFound, Unavailable):
            self.store.drain()  # pushes a lost shard never applied are void: the pass is reloaded
        self.store.forget()
        if shard_lost:
            self.finisher, self.force_base = None, True
            if self.exporter is not None:
                self.exporter = self._make_exporter()
        else:  # a pass still committing completes (or not) before the load, then its export
            self._finish_wait(failures="ignore")
            if self.exporter is not None:
                self.exporter.wait()
        if self.exporter is not None:
            self.exporter.exports = 0  # the next bundle is a base: the service drops what came after
        restored = self._meet_and_restore()
        self.store.init()  # no pass yet and a shard restarted empty: the dense array comes back
        opt_state = {k[4:]: v for k, v in restored.worker_arrays.items() if k.startswith("opt.")}
        if opt_state:
            self.worker.dense.load_state(opt_state)
        self.worker.dense.start(self.store)
        self.worker.metrics = WindowedMetrics(self.config.metric_window)
        self.pass_id, self.records_total = restored.pass_id, restored.records_total
        self.clock.next_pass(self.pass_id + 1)
        self.active = list(range(self.spec.num_workers))
        mine = [p for p in range(self.config.kafka.partitions) if p % self.spec.num_workers == self.rank]
        # no pass committed yet: nothing to go back to, every worker goes on from where it is
        self.reseek = {p: o for p, o in restored.offsets.items() if p in mine}
        self.regroups += 1

    def _start(self) -> None:
        if self.lease is not None:
            restored = self._meet_and_restore()
        else:
            restored = restore(self.root, self.client, rank=self.rank, chief=self.chief)
            self._barrier(0)  # nobody pulls before the chief's load finished
        self.store.init()  # a restored dense vector must run this job's rule (dense_update)
        sync_steps = 1 if self.spec.mode == "sync" else self.config.dense_sync_steps
        self.worker = Worker(self.model, self.store, metrics=WindowedMetrics(self.config.metric_window),
                             dense_sync_steps=sync_steps, dense_update=self.config.dense_update)
        opt_state = {k[4:]: v for k, v in restored.worker_arrays.items() if k.startswith("opt.")}
        if opt_state:
            self.worker.dense.load_state(opt_state)
        self.pass_id = restored.pass_id
        self.records_total = restored.records_total
        self.clock = PassClock(self.config.passes, workers=self.spec.num_workers)
        self.clock.next_pass(self.pass_id + 1)
        kafka = self.config.kafka
        mine = [p for p in range(kafka.partitions) if p % self.spec.num_workers == self.rank]
        self.consumer = StreamConsumer(kafka, self.config.records, self.bootstrap, membership=Membership.ASSIGN,
                                       partitions=mine, client_id=f"streamrec-trainer-{self.rank}")
        if restored.offsets:
            self.consumer.seek_to({p: o for p, o in restored.offsets.items() if p in mine})
        if self.chief and self.config.passes.export:
            self.exporter = self._make_exporter()

    def _make_exporter(self) -> Exporter:
        return Exporter(self.config.export_dir, self._background_client(), self.config.model,
                        base_every=self.config.passes.base_every)

    def _background_client(self) -> PSClient:
        # no resends: a lost shard fails the bundle (or the commit) instead of holding the next one
        return PSClient(self.spec.shard_endpoints, secret=self.spec.secret(),
                        config=ClientConfig(timeout_s=self.ps.client.config.timeout_s, retries=0))

    def _poll(self) -> Any:
        while not self.stopping.is_set():
            with self.lock:
                batch = self.consumer.poll_batch()  # type: ignore[union-attr]
                # Lag asks the broker, and the consumer is not thread-safe: refresh it here, under
                # the consumer's lock, about once a second; status() reads the cached figure.
                now = time.monotonic()
                if now - self._lag_at >= 1.0:
                    self._lag_at = now
                    with contextlib.suppress(KafkaError):
                        self.lag_partitions = self.consumer.lag()  # type: ignore[union-attr]
            yield batch

    # ------------------------------------------------------------------- loop
    def run(self) -> dict[str, Any]:
        self._start()
        assert self.worker is not None and self.consumer is not None
        pull_client = None
        if self.spec.mode == "async" and self.config.prefetch_pull:
            pull_client = PSClient(self.spec.shard_endpoints, secret=self.spec.secret())
        pull = None if pull_client is None else lambda t, k: pull_client.wait(pull_client.pull(t, k))
        idle_since = time.monotonic()
        try:
            while not self.stopping.is_set():  # once, unless a rollback re-seeks the stream
                self.reseek = None
                items = Prefetcher(self._poll(), lambda b: None if b is None else prepare(self.model, b, pull), depth=2)
                try:
                    idle_since = self._loop(items, idle_since)
                finally:
                    items.close()
                if self.reseek is None:
                    break
                with self.lock:  # batches prefetched from before the rollback point are dropped here
                    self.consumer.seek_to(self.reseek)
            self._finish_wait()  # the last pass is complete (or its failure raised) before the job reports
        finally:
            self.stopping.set()
            if pull_client is not None:
                pull_client.close()
            if self.finisher is not None:
                self.finisher.close()
            if self.exporter is not None:
                self.last_export = self.exporter.wait() or self.last_export  # the last pass's bundle is out
                self.exporter.close()
            self.consumer.close()
        return self.status()

    def _loop(self, items: Prefetcher, idle_since: float) -> float:
        for item in items:
            self._serve_requests()
            while self.paused.is_set() and not self.stopping.is_set():
                time.sleep(0.05)
                self._serve_requests()
            if self.reseek is not None:
                return time.monotonic()
            # idle means no record since idle_since: a batch that arrives late (a slow start on a
            # busy machine) is trained, not taken for the end of the stream
            done = (self.max_records is not None and self.records_run >= self.max_records) or (
                item is None and self.max_idle_s is not None and time.monotonic() - idle_since >= self.max_idle_s)
            # the chief stays while others train: it commits their passes
            leaving = done and (not self.chief or self.active == [self.rank])
            try:
                if self.lease is not None:
                    self.lease.check()  # a lost rank ends this process (Conflict)
                    if self.lease.epoch != self.epoch:
                        raise EpochMoved
                if item is not None:
                    self._train(item)
                    idle_since = time.monotonic()
                if self.clock.due() or self._peer_committing() or (
                        leaving and (self.clock.count or len(self.active) > 1)):
                    self.commit(leaving=leaving)
                    if not leaving:  # a commit's stall (slower on an object store) is not idleness of the stream
                        idle_since = time.monotonic()
            except EpochMoved:
                self._regroup(shard_lost=self._new_lease_table())
                return time.monotonic()
            except (NotFound, Unavailable):
                if self.lease is not None and self.spec.num_workers != 1:
                    with contextlib.suppress(Unavailable):  # shard 0 itself restarting moves the epoch anyway
                        self.lease.bump(self.epoch)  # a shard lost its tables or is away: everyone regroups
                    self._regroup(shard_lost=True)
                    return time.monotonic()
                if self.spec.num_workers != 1:
                    raise  # several workers: the job fails and is restarted, every worker from the last pass
                self._recover_shards()
                return time.monotonic()  # the wait for the shard is not idleness of the stream
            if leaving or self.rank not in self.active:
                self.stopping.set()
            if self.stopping.is_set():
                break
        return idle_since

    def _peer_committing(self) -> bool:
        """Another worker ended this pass (its part is written): end it here too, so every
        worker meets at the commit barrier whether or not its own clock is due."""
        if len(self.active) == 1:
            return False
        if self.root.local is None:  # an object store: a request per look, so look twice a second at most
            now = time.monotonic()
            if now < self._peer_look_at:
                return False
            self._peer_look_at = now + 0.5
        return any(checkpoints.has_worker_part(self.root, self.clock.pass_id, r) for r in self.active if r != self.rank)

    def _train(self, item: Prepared) -> None:
        assert self.worker is not None and self.consumer is not None
        batch = item.batch
        self.worker.step(item)
        with self.lock:  # pushes of this batch are in flight; drain() precedes every offset checkpoint
            self.consumer.tracker.mark_pushed(batch)
        n = len(batch)
        self.clock.add(n)
        self.records_run += n
        self.records_total += n
        if batch.event_time is not None and batch.event_time.size:
            t = float(np.nanmax(batch.event_time)) if np.isfinite(batch.event_time).any() else None
            if t is not None:
                self.newest_time = t if self.newest_time is None else max(self.newest_time, t)
        if self.catalog is not None:
            self.catalog.observe(batch)

    # ----------------------------------------------------------------- passes
    def commit(self, *, leaving: bool = False) -> dict[str, Any]:
        """End the current pass on this worker; the chief commits it (see the module docstring).
        ``leaving``: this worker's stream is done; later passes are committed without it.
        Returns the manifest of the newest pass the chief finished committing (the chief's
        commit of this pass may still be finishing in the background)."""
        assert self.worker is not None and self.consumer is not None
        t0 = time.monotonic()
        n = self.clock.pass_id
        self.store.drain()
        self.worker.dense.flush(self.store)
        with self.lock:
            offsets = self.consumer.committable()
        arrays = {f"opt.{k}": v for k, v in self.worker.dense.state().items()}
        arrays |= {f"metrics.{k}": v for k, v in self.worker.metrics.total.to_arrays().items()}
        checkpoints.write_worker_part(self.root, n, self.rank, arrays, {
            "rank": self.rank, "offsets": {str(p): o for p, o in offsets.items()}, "records": self.clock.count,
            "newest_record_time": self.newest_time, "leaving": leaving})
        self._barrier(2 * n)
        if self.chief:
            self._commit_as_chief(n)
        self._barrier(2 * n + 1)
        # from the parts (written before the first barrier): the manifest may not be written yet
        self.active = checkpoints.staying_ranks(self.root, n, self.active)
        self.worker.dense.refresh(self.store)
        self.worker.metrics = WindowedMetrics(self.config.metric_window)
        self.pass_id = n
        self.clock.next_pass(n + 1)
        self.commit_stall_s.append(time.monotonic() - t0)
        return self.last_commit

    def _commit_as_chief(self, n: int) -> None:
        """The first half of the commit (the workers wait): the shards take the save's
        consistent point; the finisher writes it out and commits (trainer.pass_commit)."""
        assert self.worker is not None
        self._finish_wait()  # one save at a time per shard: the previous commit's, then its export
        if self.exporter is not None:
            self.last_export = self.exporter.wait() or self.last_export
        k = self.config.passes.base_every
        self.client.admin.end_pass()
        evicted = None
        if n % k == 0:
            evicted = sum(sum(e.get("evicted", {}).values()) for e in self.client.admin.shrink())
        base = n % k == 1 or k == 1 or self.force_base
        try:
            saves = self.client.admin.save(into=checkpoints.shard_template(self.root, n),
                                           mode=SaveMode.BASE if base else SaveMode.DELTA,
                                           cursor="checkpoint", timeout_s=SAVE_TIMEOUT_S, detach=True)
        except Exception:
            self.force_base = True  # some shards may have advanced their chain: restart it with a base
            raise
        self.force_base = False
        export = None
        if self.exporter is not None:  # the dense weights of the snapshot point: nobody pushed since
            self.worker.dense.refresh(self.store)
            export = (self.model.params.as_dict(), None if self.catalog is None else self.catalog.snapshot())
        ranks = list(self.active)
        if self.finisher is None:
            self.finisher = CommitFinisher(self._background_client())
        self.finisher.start(lambda client: self._finish_commit(client, n, saves, ranks, evicted, export))

    def _finish_commit(self, client: PSClient, n: int, saves: list[dict], ranks: list[int], evicted: int | None,
                       export: tuple[dict[str, np.ndarray], ItemCatalog | None] | None) -> dict[str, Any]:
        """In the finisher thread: the shards' saves written, the manifest last, prune, export."""
        man = finish_pass(client, self.root, n, saves, ranks, keep=self.config.passes.keep, fields={
            "evicted": evicted, "workers": self.spec.num_workers, "mode": self.spec.mode})
        self.last_commit = man  # status() shows the pass as soon as it exists
        if export is not None and self.exporter is not None:
            dense, catalog = export
            self.exporter.start(n, dense=dense, newest_record_time=man["newest_record_time"], catalog=catalog)
        return man

    def _finish_wait(self, *, failures: str = "raise") -> dict[str, Any]:
        """Wait until the chief's last commit is finished; its manifest becomes ``last_commit``.
        A failure (a shard's save, the manifest) is raised (``failures="ignore"``: dropped, e.g.
        before a rollback); either way the next save is a base, since some shards may have
        advanced their chain on a pass that never became complete."""
        if self.finisher is None:
            return self.last_commit
        try:
            self.last_commit = self.finisher.wait() or self.last_commit
        except Exception:
            self.force_base = True
            if failures == "raise":
                raise
        return self.last_commit

    def _export(self, pass_id: int, newest: float | None) -> None:
        assert self.exporter is not None
        self.exporter.start(pass_id, dense=self.model.params.as_dict(), newest_record_time=newest,
                            catalog=None if self.catalog is None else self.catalog.snapshot())

    # ---------------------------------------------------------------- control
    def _serve_requests(self) -> None:
        while self.requests:
            op, args, box = self.requests.pop(0)
            try:
                box["result"] = getattr(self, f"_op_{op}")(**args)
            except Exception as exc:  # handed to the control thread, which answers with it
                box["error"] = exc
            box["done"].set()

    def call_in_loop(self, op: str, **args: Any) -> Any:
        """Run ``op`` on the training thread between steps (thread-safe entry for the control server)."""
        box: dict[str, Any] = {"done": threading.Event()}
        self.requests.append((op, args, box))
        if not box["done"].wait(timeout=600):
            raise Unavailable(f"training loop did not run {op!r} within 600 s")
        if "error" in box:
            raise box["error"]
        return box["result"]

    def _op_checkpoint(self) -> dict[str, Any]:
        self.commit()
        return self._finish_wait()  # asked for a checkpoint: answered when it is complete

    def _op_export(self) -> dict[str, Any]:
        if self.exporter is None:
            from core.errors import Conflict

            raise Conflict("this worker does not export (not the chief, or passes.export is off)")
        self._finish_wait()
        self.exporter.wait()
        self._export(self.pass_id, self.newest_time)
        return self.exporter.wait() or {}

    def _recover_shards(self) -> None:
        """A shard restarted empty (its dense array is gone) or stopped answering: wait for it,
        then go back to the newest complete pass (tables reloaded, stream re-read from there)."""
        deadline = time.monotonic() + 120
        while True:
            try:
                self.client.admin.health()
                break
            except Unavailable:
                if time.monotonic() > deadline:
                    raise
        self._finish_wait(failures="ignore")  # its save may have failed on the lost shard
        found = checkpoints.complete_passes(self.root)
        if not found:
            raise Unavailable("a shard lost its tables before the first pass was committed; restart the job")
        self.store.forget()
        if self.exporter is not None:  # its save may hang on the lost shard: let it fail alone, start afresh
            self.exporter = self._make_exporter()
        if self.spec.mode == "sync":  # apply (and so discard, by the load below) pushes held for a barrier
            self.client.barrier(_TAG - 1 - self.ps.steps, 1, timeout_s=60)
        self.store.init()
        self._op_rollback(found[-1])
        self.recoveries += 1

    def _op_rollback(self, pass_id: int) -> dict[str, Any]:
        """Back to a committed pass: shards load it, newer passes go, the stream re-reads from its offsets."""
        assert self.worker is not None
        from trainer.recovery import load_into_shards

        self.store.drain()
        self._finish_wait(failures="ignore")  # a pass still committing completes (or not) before the load
        if self.exporter is not None:
            self.exporter.wait()
        load_into_shards(self.client, self.root, pass_id)
        for n in checkpoints.complete_passes(self.root):
            if n > pass_id:
                checkpoints.remove_pass(self.root, n)
        man = checkpoints.read_pass(self.root, pass_id)
        _, arrays = checkpoints.read_worker_part(self.root, pass_id, self.rank)
        self.worker.dense.load_state({k[4:]: v for k, v in arrays.items() if k.startswith("opt.")})
        self.worker.dense.start(self.store)
        self.records_total = int(man.get("records_total", 0))
        self.pass_id = pass_id
        self.clock.next_pass(pass_id + 1)
        if self.exporter is not None:
            self.exporter.exports = 0  # the next bundle is a base: the service drops what came after
        self.reseek = {int(p): int(o) for p, o in man.get("offsets", {}).items()}
        return {"pass": pass_id, "offsets": self.reseek}

    def _op_shrink(self) -> dict[str, Any]:
        return {"evicted": [e.get("evicted", {}) for e in self.client.admin.shrink()]}

    def status(self) -> dict[str, Any]:
        w = self.worker
        return {"rank": self.rank, "pass": getattr(self, "pass_id", 0), "records_run": self.records_run,
                "records_total": self.records_total, "paused": self.paused.is_set(), "mode": self.spec.mode,
                "progressive": None if w is None else w.metrics.summary(),
                "phase_seconds": {} if w is None else dict(w.phase_seconds),
                "newest_record_time": self.newest_time, "recoveries": self.recoveries, "regroups": self.regroups,
                # records not yet consumed on this worker's partitions (rank 0's when asked through job control)
                "lag": sum(self.lag_partitions.values()), "lag_partitions": dict(self.lag_partitions),
                "commit_stall_s": list(self.commit_stall_s[-20:]),
                "last_commit": {k: v for k, v in self.last_commit.items() if k != "files"},
                "last_export": self.last_export}
