"""Start from the newest complete pass: shards load its table chain, the worker gets its dense
optimizer state and the Kafka offsets to seek to.

The chief (rank 0) lets any save still running on the shards end (a chief killed after
releasing the workers leaves one), deletes half-written passes and asks the shards to load; every worker
then (after a barrier, so nobody pulls half-loaded tables) reads the same manifest.

:class:`Recovery` goes back to a complete pass while the job runs:

- Regroup (leased ranks, ``STREAMREC_RANK=auto``): the membership epoch moved (a replacement
  took a dead worker's rank, or a shard lost its tables and a worker bumped the epoch). Every
  worker drops its pushes in flight, lets the chief's commit and export end (or, a shard
  lost, abandons them to fail alone), then all meet at "stopped"; the chief loads the newest
  complete pass into the shards; all meet at "loaded", so nobody pulls or pushes while it
  loads; everyone takes that pass's dense optimizer state and re-seeks to its offsets, as if
  the whole job had restarted but without restarting the processes. An epoch that moves
  again during the meetings starts them over.
- Recover shards (a single worker): a shard restarted empty or stopped answering; wait for
  it, then roll back to the newest complete pass.
- Rollback (job control, a single worker): the shards load a committed pass, newer passes
  are removed, the stream re-reads from the pass's offsets.
- A pass the disk had no room for (trainer.disk_space): its half-written directories go (which
  frees their space), then a single worker rolls back to the newest complete pass and leased ranks
  regroup on it, so its records are trained and counted again, once. Fixed ranks with several
  workers fail the job, whose restart does the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import CorruptData, DiskFull, NotFound, Unavailable
from ps.client import PSClient
from ps.cluster import ClusterSpec
from stores.store import Store, open_store
from trainer import checkpoints
from trainer.job_context import JobContext
from trainer.metrics import WindowedMetrics
from trainer.pass_commit import PassCommitter
from trainer.rank_claim import EpochMoved
from trainer.rendezvous import BARRIER_TAG
from trainer.worker import Worker

log = logging.getLogger(__name__)

SHARD_RETURN_TIMEOUT_S = 120.0  # how long a single worker waits for a lost shard to answer again


@dataclass
class Restored:
    pass_id: int = 0  # 0: nothing committed yet
    manifest: dict[str, Any] = field(default_factory=dict)
    offsets: dict[int, int] = field(default_factory=dict)
    worker_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    records_total: int = 0


def newest_usable_pass(root: Store) -> tuple[int, dict[str, Any]] | None:
    """The newest complete pass whose files verify; a corrupt one is skipped (older ones remain)."""
    for n in reversed(checkpoints.complete_passes(root)):
        try:
            return n, checkpoints.read_pass(root, n)
        except (CorruptData, NotFound):
            continue
    return None


def load_into_shards(client: PSClient, root: Store, pass_id: int) -> None:
    """The shards load pass ``pass_id``; with another shard count than wrote it, the virtual
    shards are placed anew and every shard loads its rows from all the old shards' saves."""
    placement, replace = checkpoints.shard_placement(root, pass_id, client.n_shards)
    if replace is not None:
        replace = dataclasses.replace(replace, dense_slice_min_elements=client.dense_slice_min_elements)
        log.info("pass %d: written by %d PS shards, placed anew on %d (placement version %d)", pass_id,
                 replace.saved_shards, client.n_shards, placement.version)
    client.admin.load(chain=checkpoints.chain(root, pass_id), replace=replace)
    client.set_placement(placement)


def load_newest_usable(client: PSClient, root: Store) -> tuple[int, dict[str, Any]] | None:
    """Chief: load the newest pass whose whole chain loads. A shard verifies every table file of
    a chain before it loads any (a failure leaves it unchanged), so a pass whose chain holds a
    corrupt file is quarantined and the next older one tried: recovery falls back, it does not
    wedge. Quarantined before the restore barrier, the pass is skipped by every worker too."""
    while (found := newest_usable_pass(root)) is not None:
        try:
            load_into_shards(client, root, found[0])
            return found
        except CorruptData as err:
            log.warning("pass %d does not load (%s): quarantined, trying the one before", found[0], err.message)
            checkpoints.quarantine(root, found[0], err.message)
    return None


def restore(root: Store | str, client: PSClient, *, rank: int, chief: bool) -> Restored:
    """Chief: clean up and load the shards (call before the restore barrier). Others: read only."""
    root = open_store(root)
    if chief:
        client.admin.save_wait()  # a save a killed chief left running ends before its half-committed pass goes
        checkpoints.discard_incomplete(root)
    found = load_newest_usable(client, root) if chief else newest_usable_pass(root)
    if found is None:
        return Restored()
    n, man = found
    if not chief:  # the chief's load set it; every worker routes as the shards were loaded
        client.set_placement(checkpoints.shard_placement(root, n, client.n_shards)[0])
    arrays: dict[str, np.ndarray] = {}
    # a worker that did not exist then starts its optimizer fresh
    with contextlib.suppress(CorruptData, NotFound, FileNotFoundError):
        _, arrays = checkpoints.read_worker_part(root, n, rank)
    return Restored(pass_id=n, manifest=man, offsets={int(p): int(o) for p, o in man.get("offsets", {}).items()},
                    worker_arrays=arrays, records_total=int(man.get("records_total", 0)))


def dense_optimizer_state(worker_arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The dense optimizer state in a worker part's arrays (their ``opt.`` entries)."""
    return {k[4:]: v for k, v in worker_arrays.items() if k.startswith("opt.")}


def model_train_state(worker_arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's training state in a worker part's arrays (their ``model.`` entries)."""
    return {k[6:]: v for k, v in worker_arrays.items() if k.startswith("model.")}


def reads_partition(spec: ClusterSpec, partition: int) -> bool:
    """Whether worker ``spec.rank`` of ``spec.num_workers`` reads ``partition`` (``p % W == r``) of
    the partitions the topic has, whatever ``kafka.partitions`` says (it only creates the topic)."""
    return partition % spec.num_workers == spec.rank


class Recovery:
    """Start, regroup, recover shards and roll back (the module docstring) for one worker."""

    def __init__(self, ctx: JobContext, committer: PassCommitter) -> None:
        self.ctx = ctx
        self.committer = committer
        self.regroups = 0
        self.recoveries = 0
        self.disk_recoveries = 0  # passes the disk had no room for, gone back from

    def start(self) -> Restored:
        """On start: the newest complete pass, loaded into the shards before anyone pulls."""
        ctx = self.ctx
        if ctx.rendezvous.lease is not None:
            restored = self._meet_and_restore()
        else:
            restored = restore(ctx.root, ctx.client, rank=ctx.rank, chief=ctx.chief)
            ctx.rendezvous.barrier(0, len(ctx.progress.active))  # nobody pulls before the chief's load finished
        ctx.store.init()  # a restored dense vector must run this job's rule (dense_update)
        if restored.pass_id:
            log.info("restored from pass %d (%d records trained before it)", restored.pass_id, restored.records_total)
        else:
            log.info("no committed pass: training starts from scratch")
        return restored

    def _meet_and_restore(self) -> Restored:
        """Leased ranks: every worker meets; the chief loads the newest complete pass into the
        shards between two meetings, so nobody pulls or pushes while it loads."""
        while True:
            self.ctx.rendezvous.join_epoch()
            try:
                self.ctx.rendezvous.meet("stopped", self.ctx.spec.num_workers)
                if self.ctx.chief:
                    restore(self.ctx.root, self.ctx.client, rank=self.ctx.rank, chief=True)
                self.ctx.rendezvous.meet("loaded", self.ctx.spec.num_workers)
            except EpochMoved:
                continue
            return restore(self.ctx.root, self.ctx.client, rank=self.ctx.rank, chief=False)

    def shard_lost(self, worker: Worker) -> None:
        """A shard lost its tables or is away: leased ranks regroup, a single worker recovers its shards."""
        if self.ctx.rendezvous.lease is not None and self.ctx.spec.num_workers != 1:
            with contextlib.suppress(Unavailable):  # shard 0 itself restarting moves the epoch anyway
                self.ctx.rendezvous.bump_epoch()  # everyone regroups
            self.regroup(worker, shard_lost=True)
            return
        self.recover_shards(worker)

    def regroup(self, worker: Worker, *, shard_lost: bool) -> None:
        """The epoch moved: back to the newest complete pass with every worker (module docstring).
        ``shard_lost``: a shard restarted (or shard 0, whose table is new), so the chief's commit
        finishing in the background and its export may hang on it until their timeouts: they
        fail alone (no manifest, no bundle) and fresh ones take over."""
        with contextlib.suppress(NotFound, Unavailable):
            self.ctx.store.drain()  # pushes a lost shard never applied are void: the pass is reloaded
        self.ctx.store.forget()
        if shard_lost:
            self.committer.abandon_commit()
            self.committer.renew_exporter()
        else:  # a pass still committing completes (or not) before the load, then its export
            self.committer.settle()
        self.committer.rebase_exports()
        restored = self._meet_and_restore()
        self.ctx.client.take_restart()  # a shard restart seen until now is covered by the pass just loaded
        self.ctx.store.init()  # no pass yet and a shard restarted empty: the dense array comes back
        opt_state = dense_optimizer_state(restored.worker_arrays)
        if opt_state:
            worker.dense.load_state(opt_state)
        worker.model.load_train_state(model_train_state(restored.worker_arrays))
        worker.dense.start(self.ctx.store)
        worker.metrics = WindowedMetrics(self.ctx.config.metric_window)
        self.ctx.progress.records_total = restored.records_total
        self.ctx.progress.at_pass(restored.pass_id)
        self.ctx.progress.active = list(range(self.ctx.spec.num_workers))
        # no pass committed yet: nothing to go back to, every worker goes on from where it is
        self.ctx.progress.reseek = {p: o for p, o in restored.offsets.items() if reads_partition(self.ctx.spec, p)}
        self.regroups += 1
        log.info("regrouped on pass %d with %d workers (%s)", restored.pass_id, self.ctx.spec.num_workers,
                 "a shard was lost" if shard_lost else "membership changed")

    def recover_shards(self, worker: Worker) -> None:
        """A shard restarted empty (its dense array is gone) or stopped answering: wait for it,
        then go back to the newest complete pass (tables reloaded, stream re-read from there)."""
        deadline = time.monotonic() + SHARD_RETURN_TIMEOUT_S
        while True:
            try:
                self.ctx.client.admin.health()
                break
            except Unavailable:
                if time.monotonic() > deadline:
                    raise
        self.committer.finish_wait(ignore_failure=True)  # its save may have failed on the lost shard
        if not checkpoints.complete_passes(self.ctx.root):
            raise Unavailable("a shard lost its tables before the first pass was committed; restart the job")
        self.ctx.store.forget()
        self.committer.renew_exporter()  # its save may hang on the lost shard: let it fail alone, start afresh
        if self.ctx.spec.mode == "sync":  # apply (and so discard, by the load below) pushes held for a barrier
            self.ctx.client.barrier(BARRIER_TAG - 1 - self.ctx.store.worker.steps, 1, timeout_s=60)
        self.ctx.store.init()
        log.info("the lost shard answers again: back to the newest complete pass")
        self.rollback(worker, None)
        self.recoveries += 1

    def disk_full(self, worker: Worker, err: DiskFull) -> None:
        """A pass could not be written for want of space: back to the newest complete pass (the
        module docstring). ``err`` is raised again where this process cannot go back by itself."""
        self.committer.settle()
        if self.ctx.rendezvous.lease is not None and self.ctx.spec.num_workers != 1:
            with contextlib.suppress(Unavailable):
                self.ctx.rendezvous.bump_epoch()
            self.regroup(worker, shard_lost=False)  # the chief's restore discards the half-written passes
        elif self.ctx.spec.num_workers != 1 or not checkpoints.complete_passes(self.ctx.root):
            raise err  # every worker restarts from the last pass (or, none yet, from the start)
        else:
            with contextlib.suppress(OSError):
                checkpoints.discard_incomplete(self.ctx.root)
            self.rollback(worker, None)
        self.disk_recoveries += 1

    def rollback(self, worker: Worker, pass_id: int | None) -> dict[str, Any]:
        """Back to a committed pass (None: the newest that loads): shards load it, newer passes
        go, the stream re-reads from its offsets."""
        self.ctx.store.drain()
        self.committer.settle()  # a pass still committing completes (or not) before the load
        if pass_id is None:
            found = load_newest_usable(self.ctx.client, self.ctx.root)
            if found is None:
                raise Unavailable("no committed pass loads any more (all quarantined); restart the job")
            pass_id = found[0]
        else:
            load_into_shards(self.ctx.client, self.ctx.root, pass_id)
        self.ctx.client.take_restart()  # a shard restart seen until now is covered by this load
        for n in checkpoints.complete_passes(self.ctx.root):
            if n > pass_id:
                checkpoints.remove_pass(self.ctx.root, n)
        man = checkpoints.read_pass(self.ctx.root, pass_id)
        _, arrays = checkpoints.read_worker_part(self.ctx.root, pass_id, self.ctx.rank)
        worker.dense.load_state(dense_optimizer_state(arrays))
        worker.model.load_train_state(model_train_state(arrays))
        worker.dense.start(self.ctx.store)
        self.ctx.progress.records_total = int(man.get("records_total", 0))
        self.ctx.progress.at_pass(pass_id)
        self.committer.rebase_exports()
        self.ctx.progress.reseek = {int(p): int(o) for p, o in man.get("offsets", {}).items()}
        log.info("rolled back to pass %d", pass_id)
        return {"pass": pass_id, "offsets": self.ctx.progress.reseek}
