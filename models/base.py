"""What every model is: dense parameters in a ParamSet, a forward pass to logits, and a
backward pass from d(loss)/d(logits) to dense gradients (in ``params.grads``) and sparse
gradients per table (rows aligned with ``Features.tables[t].keys``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from logrecords.dense_transform import apply_dense_transforms
from models.dense_statistics import DenseStatistics
from models.features import Features, build_features
from models.item_frequency import FrequencyEstimate
from models.layers import ParamSet, wide_backward, wide_forward
from models.model_config import ModelConfig
from tables.table_config import TableConfig


class Model:
    # False: an async job pulls the model's rows at the step, never ahead in the prefetch thread
    # (rows pulled steps ahead miss the pushes made meanwhile, by this worker and the others)
    prefetch_rows = True

    def __init__(self, config: ModelConfig, specs: list[tuple[str, tuple[int, ...]]]) -> None:
        self.config = config
        self.params = ParamSet(specs)
        self.tables: tuple[TableConfig, ...] = config.table_configs()
        self.row_width = {t.name: t.width for t in self.tables}
        self._f: Features | None = None
        # Set by a training loop that owns the model (one step at a time, never a concurrent forward,
        # outputs not kept past the next step): the layers then reuse their buffers per batch size.
        self.reuse_buffers = False
        self.readers = 1  # workers the stream is split between, this model's among them (share_stream)
        # the worker's store's item-frequency estimates shared by all workers (alpha -> estimate), if any
        self.shared_estimates: Callable[[float], FrequencyEstimate] | None = None
        # the running statistics of the standardized dense fields (None: there is none); training puts
        # their mean and std into ``config.dense_transforms`` (models.dense_statistics)
        self.dense_statistics = DenseStatistics.of(config.dense_transforms)

    def features(self, batch: Any) -> Features:
        return build_features(self.config, batch)

    def forward(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def backward(self, dlogits: np.ndarray) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def share_stream(self, readers: int, estimates: Callable[[float], FrequencyEstimate] | None = None) -> None:
        """This model trains on one of ``readers`` equal parts of the stream (one of as many workers),
        and ``estimates`` makes item-frequency estimates that all of them share (a PS's): set by the
        worker that trains it, before any step or restore."""
        if readers < 1:
            raise ValueError(f"readers must be at least 1, got {readers}")
        self.readers = readers
        self.shared_estimates = estimates

    def learn_dense(self, batch: Any) -> None:
        """Training only, once per batch trained on: add its raw dense values to the running
        statistics; once they moved enough (models.dense_statistics.REFRESH_GROWTH), put their
        mean and std into ``config`` for the batches that follow."""
        if self.dense_statistics is None:
            return
        self.dense_statistics.observe(np.asarray(batch.dense))
        if self.dense_statistics.due():
            self.use_dense_statistics()

    def count_items(self, batch: Any) -> None:
        """Training only, once per batch trained on: counts the model keeps of the batch's items
        (two_tower: their decayed record counts, models.item_popularity). Here: none."""

    def use_dense_statistics(self) -> None:
        """Put the running statistics' mean and std into ``config`` now (a pass's save does, so its
        bundle and a restore from it agree; the file job does before its test set)."""
        if self.dense_statistics is not None:
            self.config = self.config.model_copy(update={"dense_transforms": self.dense_statistics.transforms()})

    def current_dense(self, f: Features, batch: Any) -> Features:
        """``f`` with its dense inputs made again from ``batch`` with the transforms in use now:
        features built ahead (the prefetch stage, or a prefetch process's own model) took those
        of their time, which running statistics may have changed since (unchanged: kept as built)."""
        if self.dense_statistics is not None and f.transforms != self.config.dense_transforms:
            dense = np.asarray(batch.dense, np.float32)[:, : self.config.n_dense]
            f.dense = np.ascontiguousarray(apply_dense_transforms(dense, self.config.dense_transforms))
            f.transforms = self.config.dense_transforms
        return f

    def train_state(self) -> dict[str, np.ndarray]:
        """What training keeps besides parameters and optimizer state (e.g. a streaming
        estimate): written with the worker's part of every pass, so a restart goes on from it.
        Here: the running statistics of the standardized dense fields, if any, which ``config``
        takes now (what is saved is what the pass's bundle carries and a restore uses)."""
        if self.dense_statistics is None:
            return {}
        self.use_dense_statistics()
        return {f"dense_stats.{k}": v for k, v in self.dense_statistics.saved().items()}

    def load_train_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Resume from ``train_state()`` (empty: nothing was kept, start afresh)."""
        if self.dense_statistics is not None:
            self.dense_statistics.load_state({k.removeprefix("dense_stats."): v for k, v in arrays.items()
                                              if k.startswith("dense_stats.")})
            self.use_dense_statistics()

    def _sparse_grads(self, *, zero_dense: bool = True) -> dict[str, np.ndarray]:
        """Zeroed sparse gradients of the last forward's keys; the dense ones zeroed too unless the
        model's backward writes every one of them (``zero_dense=False``: a 1.7 MB pass saved)."""
        f = self._f
        assert f is not None, "backward before forward"
        if zero_dense:
            self.params.grads[...] = 0.0
        return {t: np.zeros((ti.keys.shape[0], self.row_width[t]), np.float32) for t, ti in f.tables.items()}

    @staticmethod
    def _add_wide(f: Features, rows: dict[str, np.ndarray], z: np.ndarray) -> None:
        """z += the wide weights (row column 0) of every id of each record."""
        for t, ti in f.tables.items():
            wide_forward(f.rows_of(rows, t), ti.idx, ti.offs, z)

    @staticmethod
    def _wide_grads(f: Features, dlogits: np.ndarray, grads: dict[str, np.ndarray]) -> None:
        for t, ti in f.tables.items():
            wide_backward(dlogits, ti.idx, ti.offs, grads[t])
