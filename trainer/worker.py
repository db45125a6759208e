"""One training step per call, in named phases:

    prepare  (features: keys deduplicated across the batch's slots, per table)
    pull     (sparse rows of those keys)
    forward  (logits; the batch is scored here, BEFORE training: progressive validation)
    backward (dense and sparse gradients)
    push     (sparse gradients with show/click counts; dense: the worker's optimizer step and
              every few steps its change to the PS, or the dense gradient to the PS whose
              shards run the optimizer (trainer.dense_sync); end of step)

``prepare`` (and, in async mode, the sparse pull) may run ahead for the next batch in the
prefetch stage (:mod:`trainer.prefetch`); the step then starts at its dense pull.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.errors import ConfigError
from logrecords.batch import Batch
from models.base import Model
from models.features import Features
from models.layers import bce_with_logits
from trainer.dense_sync import make_dense
from trainer.job_config import DenseUpdate
from trainer.metrics import WindowedMetrics
from trainer.params import ParamStore

PHASES = ("prepare", "pull", "forward", "backward", "push")


@dataclass
class Prepared:
    """A batch made ready for a step: its features and, when prefetched, its sparse rows."""

    batch: Batch
    features: Features
    rows: dict[str, np.ndarray] | None = None


def prepare(model: Model, batch: Batch, pull: Callable[[str, np.ndarray], np.ndarray] | None = None) -> Prepared:
    """Features of ``batch``; with ``pull`` also its sparse rows (the prefetch stage)."""
    f = model.features(batch)
    rows = None if pull is None else {t: pull(t, ti.keys) for t, ti in f.tables.items()}
    return Prepared(batch, f, rows)


AUTO_PARTS = "auto"
WORKERS_PER_DENSE_PART = 8  # auto: one more MLP step per batch for each 8 workers (16 workers: 2, 32: 4)


def dense_parts_for(parts: int | str, *, workers: int, mode: str, model: Model) -> int:
    """A job's ``dense_parts`` as its workers take it: ``auto`` gives each worker one MLP step per
    batch for every ``WORKERS_PER_DENSE_PART`` workers, so the merged MLP keeps more of one
    worker's sequential steps as workers are added (averaging K models that each took 1/K of the
    steps is what costs a many-worker job its AUC); 1 in sync mode and for a model without an MLP
    to split. An int is taken as it is."""
    if parts != AUTO_PARTS:
        return int(parts)
    if mode == "sync" or not hasattr(model, "train_in_parts"):
        return 1
    return auto_dense_parts(workers)


def auto_dense_parts(workers: int) -> int:
    """``auto``'s parts for a job of ``workers`` with an MLP to split, in async mode."""
    return max(1, workers // WORKERS_PER_DENSE_PART)


def check_dense_parts(parts: int, mode: str) -> None:
    """Dense steps in parts merge mid-batch: sync mode holds every push until the step's barrier."""
    if parts > 1 and mode == "sync":
        raise ConfigError(f"dense_parts {parts} needs async mode: sync mode applies the dense change once per step")


class Worker:
    def __init__(self, model: Model, store: ParamStore, *, metrics: WindowedMetrics | None = None,
                 dense_sync_steps: int = 1, dense_update: DenseUpdate = DenseUpdate.LOCAL,
                 steps_per_batch: int = 1, dense_parts: int = 1) -> None:
        if steps_per_batch < 1:
            raise ValueError(f"steps_per_batch must be >= 1, got {steps_per_batch}")
        if dense_parts > 1 and not hasattr(model, "train_in_parts"):
            raise ConfigError(f"dense_parts {dense_parts}: the {model.config.type} model steps its dense part once "
                              "per batch (wide_deep takes one step per part)")
        self.model = model
        self.steps_per_batch = steps_per_batch
        self.dense_parts = dense_parts  # dense optimizer steps per batch, one per slice of its records
        model.reuse_buffers = True  # this worker runs its model's steps one at a time
        model.share_stream(store.num_workers, store.shared_frequency)
        self.store = store
        self.metrics = metrics or WindowedMetrics()
        self.dense = make_dense(dense_update, model.params.values, model.config.dense_optimizer,
                                sync_steps=dense_sync_steps, merge=model.config.dense_merge,
                                average=model.config.dense_average, schedule=model.config.dense_schedule,
                                outer=model.config.dense_outer, steps_per_batch=dense_parts,
                                ps_lr_scaling=model.config.dense_ps_lr_scaling)
        self.dense.start(store)
        self.phase_seconds: dict[str, float] = defaultdict(float)
        # this thread's CPU seconds per phase: beside the wall seconds they tell computing from waiting
        self.phase_cpu_seconds: dict[str, float] = defaultdict(float)
        self.steps = 0
        self.records = 0

    def _timed(self, phase: str, t0: tuple[float, float]) -> tuple[float, float]:
        t1 = (time.perf_counter(), time.thread_time())
        self.phase_seconds[phase] += t1[0] - t0[0]
        self.phase_cpu_seconds[phase] += t1[1] - t0[1]
        return t1

    def step(self, item: Batch | Prepared) -> float:
        """Train on one batch (``steps_per_batch`` updates); returns its mean loss (measured before
        the first update)."""
        t = (time.perf_counter(), time.thread_time())
        p = item if isinstance(item, Prepared) else prepare(self.model, item)
        f = self.model.current_dense(p.features, p.batch)
        t = self._timed("prepare", t)
        loss = self._update(f, p.rows, t, first=True)
        for _ in range(self.steps_per_batch - 1):
            self._update(f, None, (time.perf_counter(), time.thread_time()), first=False)
        self.model.learn_dense(p.batch)  # the standardized fields' running statistics (models.dense_statistics)
        self.steps += 1
        self.records += f.n
        return loss

    def _update(self, f: Features, rows: dict[str, np.ndarray] | None, t: tuple[float, float], *,
                first: bool) -> float:
        """One update from ``f``. Only the first counts the batch's metrics and its keys' shows and
        clicks (admission, CTR): a repeat is the same records, learnt from once more."""
        if rows is None:  # not pulled ahead, or a repeat: it reads what its previous update pushed (in order per shard)
            rows = {name: self.store.pull_sparse(name, ti.keys) for name, ti in f.tables.items()}
        t = self._timed("pull", t)
        if self.dense_parts > 1:
            return self._update_in_parts(f, rows, t, first=first)
        logits = self.model.forward(f, rows)
        loss, probs, dlogits = bce_with_logits(logits, f.labels)
        if first:
            self.metrics.add(f.labels, probs)
        t = self._timed("forward", t)
        grads = self.model.backward(dlogits)
        t = self._timed("backward", t)
        self._push_sparse(f, grads, first=first)
        synced = self.dense.update(self.model.params.grads, self.store)
        self.store.end_step()
        if synced:
            self.dense.refresh(self.store)
        self._timed("push", t)
        return loss

    def _update_in_parts(self, f: Features, rows: dict[str, np.ndarray], t: tuple[float, float], *,
                         first: bool) -> float:
        """:meth:`_update` with ``dense_parts`` dense steps (forward and backward are one phase here)."""
        loss, probs, grads = self.model.train_in_parts(f, rows, self.dense_parts, self._dense_step)
        if first:
            self.metrics.add(f.labels, probs)
        t = self._timed("backward", t)
        self._push_sparse(f, grads, first=first)
        self.store.end_step()
        self._timed("push", t)
        return loss

    def _dense_step(self, grads: np.ndarray) -> None:
        if self.dense.update(grads, self.store):  # async: the merge is not waiting for a barrier
            self.dense.refresh(self.store)

    def _push_sparse(self, f: Features, grads: dict[str, np.ndarray], *, first: bool) -> None:
        for name, ti in f.tables.items():
            shows, clicks = (ti.shows, ti.clicks) if first else (np.zeros_like(ti.shows), np.zeros_like(ti.clicks))
            self.store.push_sparse(name, ti.keys, grads[name], shows, clicks)

    def score(self, item: Batch | Prepared) -> np.ndarray:
        """Infer mode: probabilities with the current parameters, nothing pushed (the rows of a
        prepared batch as pulled ahead, else pulled now)."""
        p = item if isinstance(item, Prepared) else prepare(self.model, item)
        f = self.model.current_dense(p.features, p.batch)
        rows = p.rows if p.rows is not None else {name: self.store.pull_sparse(name, ti.keys)
                                                  for name, ti in f.tables.items()}
        z = self.model.forward(f, rows)
        return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)
