"""An exponential moving average of a worker's dense (MLP) weights, for evaluation and export.

Training goes on with the raw weights; the average is what the test set is scored with (the
file job) and what a bundle exports (the streaming job), as TensorFlow's
``ExponentialMovingAverage`` is used for eval: one-pass SGD ends on a noisy iterate, and the
average of the last few hundred steps' weights sits nearer the optimum (Polyak averaging).

The average starts empty and is bias-corrected, as Adam's moments (Kingma & Ba, section 3):
``acc = decay * acc + (1 - decay) * w`` from ``acc = 0``, read as ``acc / (1 - decay^t)``, so
at any ``t`` it is the weighted mean of the ``t`` iterates seen, weights ``decay^(t - i)``;
no warm-up constant is needed. Each worker averages the weights it trains with (its own copy,
merged with the others' at every ``dense_sync_steps``); the chief's average is the one used.
With ``per_job_batch`` the decay counts the job's batches, not the worker's steps: among K workers
each taking P dense steps per batch, one step's keep is ``decay^(K/P)``, so the average spans the
records one worker's would (per step, 16 workers' chief averaged nearly its whole pass, the early
weights among it). The sparse rows are not averaged: most are touched a few times in a pass.
"""

from __future__ import annotations

import numpy as np

from core.errors import CorruptData
from models.model_config import DenseAverageConfig
from tables.dense_optimizer import moving_average


class DenseAverage:
    """The moving average of one flat float32 vector; ``state`` is what a checkpoint keeps
    (``avg``: the uncorrected accumulator, ``avg_t``: the steps averaged, float64)."""

    def __init__(self, config: DenseAverageConfig, size: int, *, steps_per_batch: int = 1) -> None:
        self.config = config
        self.steps_per_batch = steps_per_batch  # the dense steps a worker takes per batch (dense_parts)
        self.decay = float(config.decay)  # one step's keep (set by the workers: with_workers)
        self.state: dict[str, np.ndarray] = {"avg": np.zeros(size, np.float32), "avg_t": np.zeros(1, np.float64)}
        self.with_workers(1)

    def with_workers(self, workers: int) -> None:
        """Set one step's keep for ``workers`` workers: ``decay^(workers / steps_per_batch)`` with
        ``per_job_batch``, else ``decay``."""
        exponent = workers / self.steps_per_batch if self.config.per_job_batch else 1.0
        self.decay = float(self.config.decay) ** exponent

    @property
    def steps(self) -> int:
        return int(self.state["avg_t"][0])

    def update(self, values: np.ndarray) -> None:
        """Add one step's weights (after the step's update)."""
        acc, keep = self.take_step()
        moving_average(acc, values, keep)

    def take_step(self) -> tuple[np.ndarray, np.float32]:
        """Count one step whose weights the caller adds itself: returns ``(acc, keep)``, to be made
        acc = keep * acc + (1 - keep) * w (the dense optimizer does it in its own pass over w)."""
        self.state["avg_t"][0] += 1
        return self.state["avg"], np.float32(self.decay)

    def read(self, values: np.ndarray) -> np.ndarray:
        """The bias-corrected average (a new array); ``values`` when no step was averaged yet."""
        t = self.state["avg_t"][0]
        if t == 0:
            return values.copy()
        return self.state["avg"] * np.float32(1.0 / (1.0 - self.decay**t))

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Take over a saved average; a save without one (taken with averaging off) starts it empty."""
        acc, t = state.get("avg"), state.get("avg_t")
        if acc is None or t is None:
            self.state["avg"][...] = 0
            self.state["avg_t"][...] = 0
            return
        if acc.shape != self.state["avg"].shape or t.shape != (1,):
            raise CorruptData(f"dense average of shape {acc.shape}, the model's dense vector: "
                              f"{self.state['avg'].shape}")
        self.state["avg"][...] = acc
        self.state["avg_t"][...] = t
