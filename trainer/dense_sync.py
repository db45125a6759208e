"""A worker's dense model: trained locally, merged through the parameter server every k steps.

Each worker applies its dense optimizer to its own copy at every step, and every
``sync_steps`` steps adds its change since the last sync (local - base) to the PS dense
vector, then continues from the merged value (Paddle's GEO rule, for the dense part). With
``sync_steps=1`` and one worker this is exactly local training; in sync mode the deltas of a
step are summed by the shards at the barrier. A shard then only sums (no optimizer run per
worker push), which is what lets it keep up with many workers.
"""

from __future__ import annotations

import numpy as np

from trainer.dense_optim import DenseOptimizer
from trainer.params import ParamStore


class DenseSync:
    def __init__(self, values: np.ndarray, optimizer: DenseOptimizer, *, sync_steps: int = 1) -> None:
        self.values = values  # the model's flat dense vector, updated in place
        self.base = values.copy()
        self.optimizer = optimizer
        self.sync_steps = max(1, sync_steps)
        self.steps = 0

    def start(self, store: ParamStore) -> None:
        """Begin from the store's current value."""
        fresh = store.pull_dense()
        self.values[...] = fresh
        self.base[...] = fresh

    def update(self, grads: np.ndarray, store: ParamStore) -> bool:
        """Apply one optimizer step; on a sync step also send the change. True when the caller
        must call :meth:`refresh` after the step ends (after the sync barrier)."""
        self.optimizer.step(self.values, grads)
        self.steps += 1
        if self.steps % self.sync_steps:
            return False
        store.add_dense(self.values - self.base)
        return True

    def refresh(self, store: ParamStore) -> None:
        self.start(store)

    def flush(self, store: ParamStore) -> None:
        """Send any change not yet sent (end of training, before a checkpoint)."""
        if self.steps % self.sync_steps:
            store.add_dense(self.values - self.base)
            self.steps += self.sync_steps - self.steps % self.sync_steps
            self.refresh(store)
