"""The outer optimizer on a worker's dense merges (``model.dense_outer``; SlowMo, Wang et al. 2020;
DiLoCo, Douillard et al. 2023).

At each merge a worker's share of its change since its last merge (``dense_merge``'s: whole or
/ workers) is a pseudo-gradient ``g`` (its negative), and the worker adds ``lr * (g + momentum *
u)`` with ``u = momentum * u + g`` (Nesterov; heavy-ball adds ``lr * u``) instead of ``g``.

The momentum lives on the worker, over its own merges: the merge is asynchronous (each worker adds
when it reaches its merge step), so the shard has no round whose changes it could average first.
Momentum is linear, so the sum of the workers' buffers is the buffer of the summed changes: while
the workers merge at the same rate (as they do, each taking every K-th batch), what reaches the PS
is the shard-side outer step on the merged change, with no state or rule on the shards, which only
add. The buffer is checkpointed in the worker's part of a pass.

With several workers, ``reset_moments`` starts the worker's dense optimizer again after each merge, and
``beta1_with_workers`` runs its Adam with that beta1 (0: no momentum of its own; the merge's average of
the workers' steps does the smoothing).
"""

from __future__ import annotations

import numpy as np

from models.model_config import DenseOuterConfig
from tables.dense_optimizer import DenseOptimizer


class OuterStep:
    def __init__(self, config: DenseOuterConfig, size: int) -> None:
        self.config = config
        self.lr = np.float32(config.lr)
        self.momentum = np.float32(config.momentum)
        self.u = np.zeros(size if config.momentum > 0 else 0, np.float32)
        self.restarted_steps = np.zeros(1, np.float64)  # the optimizer steps before its last restart (a schedule's)

    def apply(self, change: np.ndarray) -> None:
        """Turn ``change`` (the merge rule's share of the worker's change) into what is added, in place."""
        if self.momentum > 0:
            self.u *= self.momentum
            self.u += change
            if self.config.nesterov:
                change += self.momentum * self.u
            else:
                change[...] = self.u
        if self.lr != 1:
            change *= self.lr

    def with_workers(self, optimizer: DenseOptimizer, values: np.ndarray) -> DenseOptimizer:
        """``optimizer`` with ``beta1_with_workers`` as Adam's beta1 (its state kept); itself when it has it already."""
        beta1 = self.config.beta1_with_workers
        if beta1 is None or optimizer.config.kind != "adam" or optimizer.config.beta1 == beta1:
            return optimizer
        out = DenseOptimizer(optimizer.config.model_copy(update={"beta1": beta1}), values)
        out.load_state(optimizer.state)
        return out

    def restart(self, optimizer: DenseOptimizer) -> None:
        """The optimizer's state as at its start (``reset_moments``): Adam's moments and step count at 0 (so
        that its bias correction starts again), Adagrad's accumulators at their initial value; FTRL's
        state is its weights (the merged ones now), so it is left as it is."""
        s = optimizer.state
        if optimizer.config.kind == "ftrl":
            return
        self.restarted_steps += s["t"]
        s["t"][...] = 0
        for key in ("m", "v"):
            if key in s:
                s[key][...] = 0
        if "acc" in s:
            s["acc"][...] = np.float32(optimizer.config.initial_accumulator)

    @property
    def state(self) -> dict[str, np.ndarray]:
        return {"outer_t": self.restarted_steps} | ({"outer_u": self.u} if self.u.shape[0] else {})

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        if "outer_t" in state:
            self.restarted_steps[...] = state["outer_t"]
        if self.u.shape[0] and "outer_u" in state:
            self.u[...] = state["outer_u"]

