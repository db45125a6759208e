"""How a worker's dense model is updated: ``dense_update: local`` or ``ps``.

- :class:`LocalDense` (``local``): each worker applies its dense optimizer to its own copy at
  every step, and every ``sync_steps`` steps adds its change since the last sync (local -
  base) to the PS dense vector, then continues from the merged value (Paddle's GEO rule, for
  the dense part). The shard only sums (its rule is SGD at lr 1), and the optimizer state is
  the worker's (checkpointed in the worker's part of a pass). ``merge``: the change is added
  whole (``sum``, GEO) or divided by the number of workers (``mean``: the PS vector is then the
  average of the workers' models, as in local SGD). Summed, two workers' changes since one base
  were each computed without the other's, and together overshoot: ``mean`` comes closer to one
  worker's test AUC (bench/RESULTS.md). ``model.dense_outer`` puts an outer step between the
  share and the PS (an outer lr and momentum, and with ``reset_moments`` the worker's optimizer
  state starts again after each merge: :mod:`trainer.dense_outer`).
- :class:`PSDense` (``ps``): workers push their dense GRADIENTS every step and the shard's
  dense table runs the optimizer (Paddle's async communicator, one gradient per send); each
  worker pulls fresh parameters after every ``sync_steps``-th step. In sync mode the shards
  hold a step's gradients of all workers, sum them at the barrier and apply the optimizer
  once, and every worker pulls after every step. Asynchronous pushes are each a step of the
  shard's optimizer at lr / sqrt(K) among K workers (``model.dense_ps_lr_scaling``): K pushes
  computed from stale copies act as momentum, and at the full lr a many-worker job's test AUC
  fell apart (bench/RESULTS.md). The optimizer state lives on the shards and
  is saved and restored with them. (Taking the pull's answer one step later, so that its
  round trip overlaps compute, was no faster on 2 cores and lowered the test AUC, so the pull
  blocks.)

Both offer the same verbs to the worker and the job: ``start``/``refresh`` (take the PS's
value), ``update`` (one step; True when the caller must refresh after the step's end),
``flush`` (send what is not sent yet), ``state``/``load_state`` (what a pass keeps of
this worker), and ``served`` / ``serve_average`` (the weights to evaluate and export: with
``model.dense_average`` the moving average of the weights this worker trained with after each
step, :mod:`trainer.dense_average`, kept in the worker's part of a pass; else the raw ones).
"""

from __future__ import annotations

import numpy as np

from core.errors import ConfigError
from models.layers import ParamSet
from models.model_config import DenseAverageConfig, DenseMerge, DenseOuterConfig, DenseScheduleConfig
from tables.dense_optimizer import DenseOptimizer
from tables.table_config import OptimizerConfig
from trainer.dense_average import DenseAverage
from trainer.dense_outer import OuterStep
from trainer.job_config import DenseUpdate
from trainer.params import ParamStore


class _Served:
    """What both rules share: the weights served for evaluation and export (raw or averaged)."""

    values: np.ndarray
    average: DenseAverage | None

    def served(self) -> np.ndarray:
        """The dense vector to evaluate and export (a new array): the average when on, else the raw weights."""
        return self.values.copy() if self.average is None else self.average.read(self.values)

    def served_params(self, params: ParamSet) -> dict[str, np.ndarray]:
        """:meth:`served` as the model's named arrays (what a bundle exports), laid out as ``params``."""
        flat, out, start = self.served(), {}, 0
        for name, shape in params.shapes.items():
            size = int(np.prod(shape))
            out[name] = flat[start : start + size].reshape(shape)
            start += size
        return out

    def serve_average(self) -> None:
        """Put the served weights in place of the raw ones (training is over: the file job's evaluation)."""
        if self.average is not None:
            self.values[...] = self.average.read(self.values)


class LocalDense(_Served):
    def __init__(self, values: np.ndarray, optimizer: OptimizerConfig, *, sync_steps: int = 1,
                 merge: DenseMerge = DenseMerge.SUM, average: DenseAverageConfig | None = None,
                 schedule: DenseScheduleConfig | None = None, outer: DenseOuterConfig | None = None,
                 steps_per_batch: int = 1) -> None:
        self.values = values  # the model's flat dense vector, updated in place
        if schedule is not None and optimizer.kind == "ftrl":
            raise ConfigError("model.dense_schedule is for a dense optimizer of kind sgd, adagrad or adam, not ftrl")
        self.schedule = schedule
        self.outer = None if outer is None else OuterStep(outer, values.shape[0])
        self.average = (None if average is None
                        else DenseAverage(average, values.shape[0], steps_per_batch=steps_per_batch))
        self.base = values.copy()
        self.optimizer = DenseOptimizer(optimizer, values)
        self.sync_steps = max(1, sync_steps)
        self.merge = merge
        self.share = np.float32(1.0)  # the part of a change sent: 1, or 1/workers for mean (start)
        self.steps = 0

    def start(self, store: ParamStore) -> None:
        """Begin from the store's current value."""
        self.share = np.float32(1.0 / store.num_workers if self.merge is DenseMerge.MEAN else 1.0)
        if self.average is not None:
            self.average.with_workers(store.num_workers)
        if self.outer is not None and store.num_workers > 1:
            self.optimizer = self.outer.with_workers(self.optimizer, self.values)
        fresh = store.pull_dense()
        self.values[...] = fresh
        self.base[...] = fresh

    def update(self, grads: np.ndarray, store: ParamStore) -> bool:
        """Apply one optimizer step; on a sync step also send the change. True when the caller
        must call :meth:`refresh` after the step ends (after the sync barrier)."""
        scale = 1.0 if self.schedule is None else self.schedule.factor(self._steps_taken() + 1)
        # the moving average of the weights is taken in the optimizer's pass over them
        average = None if self.average is None else self.average.take_step()
        self.optimizer.step(self.values, grads, lr_scale=scale, average=average)
        self.steps += 1
        if self.steps % self.sync_steps:
            return False
        self._send(store)
        return True

    def _steps_taken(self) -> int:
        """The optimizer steps of this worker so far (across restarts of its state at merges)."""
        return self.optimizer.steps + (0 if self.outer is None else int(self.outer.restarted_steps[0]))

    def _send(self, store: ParamStore) -> None:
        change = self.values - self.base
        if self.share != 1:
            change *= self.share
        if self.outer is not None:
            self.outer.apply(change)
            # one worker's merge changes nothing of its model: its optimizer state stays its own
            if self.outer.config.reset_moments and store.num_workers > 1:
                self.outer.restart(self.optimizer)
        store.add_dense(change)

    def refresh(self, store: ParamStore) -> None:
        self.start(store)

    def flush(self, store: ParamStore) -> None:
        """Send any change not yet sent (end of training, before a checkpoint)."""
        if self.steps % self.sync_steps:
            self._send(store)
            self.steps += self.sync_steps - self.steps % self.sync_steps
            self.refresh(store)

    def state(self) -> dict[str, np.ndarray]:
        out = self.optimizer.state if self.average is None else self.optimizer.state | self.average.state
        return out if self.outer is None else out | self.outer.state

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        self.optimizer.load_state(state)
        if self.average is not None:
            self.average.load_state(state)
        if self.outer is not None:
            self.outer.load_state(state)


class PSDense(_Served):
    def __init__(self, values: np.ndarray, *, sync_steps: int = 1, average: DenseAverageConfig | None = None,
                 steps_per_batch: int = 1, lr_scaling: str = "none") -> None:
        self.values = values
        self.lr_scaling = lr_scaling  # model.dense_ps_lr_scaling (its default is the model's, not this one)
        self.lr_scale = 1.0  # each push's multiple of the shard's dense lr (start: from the workers)
        self.average = (None if average is None
                        else DenseAverage(average, values.shape[0], steps_per_batch=steps_per_batch))
        self.sync_steps = max(1, sync_steps)
        self.steps = 0

    def start(self, store: ParamStore) -> None:
        if self.average is not None:
            self.average.with_workers(store.num_workers)
        self.lr_scale = ps_lr_scale(self.lr_scaling, store.num_workers)
        self.values[...] = store.pull_dense()

    def update(self, grads: np.ndarray, store: ParamStore) -> bool:
        # a copy: an async push is still being sent while the next backward overwrites grads
        store.push_dense(grads.copy(), lr_scale=self.lr_scale)
        if self.average is not None:  # the weights this step trained with (pulled every sync_steps)
            self.average.update(self.values)
        self.steps += 1
        return self.steps % self.sync_steps == 0

    def refresh(self, store: ParamStore) -> None:
        self.start(store)  # a shard answers in order: the pull sees this worker's pushes

    def flush(self, store: ParamStore) -> None:
        """Nothing is held here: every gradient was sent (``store.drain`` waits for them)."""

    def state(self) -> dict[str, np.ndarray]:
        return {} if self.average is None else self.average.state  # the optimizer state is the shards'

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if self.average is not None:
            self.average.load_state(state)


Dense = LocalDense | PSDense


def ps_lr_scale(scaling: str, workers: int) -> float:
    """``model.dense_ps_lr_scaling``'s multiple of the shard's dense lr for one push of ``workers``."""
    return 1.0 / float(np.sqrt(workers)) if scaling == "inverse_sqrt" and workers > 1 else 1.0


def make_dense(update: DenseUpdate, values: np.ndarray, optimizer: OptimizerConfig, *, sync_steps: int,
               merge: DenseMerge = DenseMerge.SUM, average: DenseAverageConfig | None = None,
               schedule: DenseScheduleConfig | None = None, outer: DenseOuterConfig | None = None,
               steps_per_batch: int = 1, ps_lr_scaling: str = "none") -> Dense:
    if update is DenseUpdate.PS:
        if schedule is not None:  # the shard's optimizer has no step count of the worker's
            raise ConfigError("model.dense_schedule needs dense_update: local (the worker runs the dense optimizer)")
        # dense_merge and dense_outer act on the workers' merges, which ps has none of: both are not used
        # ftrl's lr is in its closed form: its steps take no scale
        return PSDense(values, sync_steps=sync_steps, average=average, steps_per_batch=steps_per_batch,
                       lr_scaling="none" if optimizer.kind == "ftrl" else ps_lr_scaling)
    return LocalDense(values, optimizer, sync_steps=sync_steps, merge=merge, average=average, schedule=schedule,
                      outer=outer, steps_per_batch=steps_per_batch)
