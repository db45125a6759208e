"""Running statistics of the standardized dense fields, kept with the model that trains on them.

A dense field with ``transform: {kind: standardize, mean, std}`` enters the model as
(x - mean) / std. The schema's mean and std are a sample's (``schema infer``'s); training keeps
the count, mean and sum of squared deviations (M2) of every raw value it trains on, started from
the schema's as from ``prior_count`` values, and the model's config carries the running mean and
std in place of the schema's (:meth:`DenseStatistics.transforms`). So the model's config stays the
one source of the transforms: the trainer's features, a checkpoint's restore and the exported
bundle (the service's features) all read them from it.

Each batch's moments are merged into the running ones with Chan et al.'s pairwise update
(float64, vectorised over the fields), which is Welford's for a batch of one. The state
(``count``, ``mean``, ``m2``, and the dense ``columns`` they are of) is written with the
worker's part of each pass (:meth:`models.base.Model.train_state`) and restored with it. Each
worker keeps its own estimate from the records it trains on; the chief's is the one its
bundles carry.
"""

from __future__ import annotations

import numpy as np

from core.errors import CorruptData
from logrecords.dense_transform import DenseTransform, StandardizeTransform, finite_or_zero

STATE_KEYS = ("count", "mean", "m2")
# the model's config takes the estimate anew once the count grew by this share since it last did: a new
# config makes the next batch's feature plans anew (~0.3 ms, a small model's whole step), and meanwhile
# the running mean moves by under this share of the gap between the new values' mean and it
REFRESH_GROWTH = 1.0 / 64
# a std under this share of |mean| (or of 1, near 0) is float32's rounding of a constant field, not spread
STD_FLOOR = 1e-6


class DenseStatistics:
    """count/mean/M2 of the raw values of ``transforms``' standardize fields (float64[k] each, in
    column order), started from each one's ``mean``/``std`` weighted by its ``prior_count``."""

    def __init__(self, transforms: tuple[DenseTransform, ...]) -> None:
        self.base = transforms
        self.columns = np.array([j for j, t in enumerate(transforms) if isinstance(t, StandardizeTransform)], np.int64)
        self._prior = [t for t in transforms if isinstance(t, StandardizeTransform)]
        self._log = np.array([t.log for t in self._prior], np.bool_)  # these fields' statistics are of logs
        self.state: dict[str, np.ndarray] = {k: np.zeros(len(self._prior), np.float64) for k in STATE_KEYS}
        self.reset()
        self.taken_at = -1.0  # the smallest count when transforms() was last read (never: -1, so due)

    @classmethod
    def of(cls, transforms: tuple[DenseTransform, ...]) -> DenseStatistics | None:
        """The statistics of ``transforms``' standardize fields; None when there is none."""
        return cls(transforms) if any(isinstance(t, StandardizeTransform) for t in transforms) else None

    def reset(self) -> None:
        """Back to the prior: each field's mean and std as from its ``prior_count`` values."""
        count = np.array([t.prior_count for t in self._prior], np.float64)
        std = np.array([t.std for t in self._prior], np.float64)
        self.state["count"][...] = count
        self.state["mean"][...] = [t.mean for t in self._prior]
        self.state["m2"][...] = std * std * count

    def observe(self, dense: np.ndarray) -> None:
        """Add the raw values of a batch's standardized fields (``dense``: (n, >= d), the batch's
        dense values before any transform; a non-finite one reads as 0, as the transform reads it; a
        ``log`` field's value as log1p(max(x, 0)))."""
        if dense.shape[0] == 0:
            return
        x = finite_or_zero(dense[:, self.columns].astype(np.float64))
        if self._log.any():
            x[:, self._log] = np.log1p(np.maximum(x[:, self._log], 0.0))
        n = float(x.shape[0])
        batch_mean = x.mean(axis=0)
        batch_m2 = np.square(x - batch_mean).sum(axis=0)
        count, mean, m2 = self.state["count"], self.state["mean"], self.state["m2"]
        total = count + n
        delta = batch_mean - mean
        mean += delta * (n / total)
        m2 += batch_m2 + delta * delta * (count * n / total)
        count[...] = total

    def due(self) -> bool:
        """Whether the count grew by ``REFRESH_GROWTH`` since :meth:`transforms` was last read."""
        return float(self.state["count"].min()) >= self.taken_at * (1.0 + REFRESH_GROWTH)

    def mean_std(self) -> tuple[np.ndarray, np.ndarray]:
        """The running mean and (population) std per standardized field, float64[k]; a field with
        fewer than 2 values keeps its prior std, and the std is floored at ``STD_FLOOR`` of the mean's size."""
        count, mean, m2 = self.state["count"], self.state["mean"], self.state["m2"]
        prior = np.array([t.std for t in self._prior], np.float64)
        std = np.where(count >= 2, np.sqrt(m2 / np.maximum(count, 1.0)), prior)
        return mean.copy(), np.maximum(std, STD_FLOOR * np.maximum(np.abs(mean), 1.0))

    def transforms(self) -> tuple[DenseTransform, ...]:
        """The transforms to use now: the standardize ones with the running mean and std (and
        ``prior_count``: the values behind them), the others as they were."""
        mean, std = self.mean_std()
        count = self.state["count"]
        self.taken_at = float(count.min())
        out = list(self.base)
        for i, j in enumerate(self.columns):
            out[j] = self.base[j].model_copy(update={"mean": float(mean[i]), "std": float(std[i]),
                                                     "prior_count": int(count[i])})
        return tuple(out)

    def saved(self) -> dict[str, np.ndarray]:
        """What a pass keeps: the state (copies), the dense columns it is of and which are of logs."""
        return {k: v.copy() for k, v in self.state.items()} | {"columns": self.columns.copy(),
                                                               "logs": self._log.astype(np.int8)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Take over saved statistics (:meth:`saved`) of the fields standardized then and now (of
        logs then and now, or of values); a field standardized otherwise only now (the schema
        changed since), or a save without statistics, starts from the prior."""
        self.reset()
        if not all(k in state for k in (*STATE_KEYS, "columns")):
            return
        columns = state["columns"]
        logs = state.get("logs", np.zeros(columns.shape, np.int8))
        if any(state[k].shape != columns.shape or state[k].dtype != np.float64 for k in STATE_KEYS) \
                or columns.ndim != 1 or logs.shape != columns.shape:
            shapes = {k: state[k].shape for k in (*STATE_KEYS, "logs") if k in state}
            raise CorruptData(f"dense statistics of shapes {shapes} for the {columns.shape} columns they name")
        # a saved field's place in the saved arrays, by its column and whether it is of logs
        at = {(int(j), bool(g)): i for i, (j, g) in enumerate(zip(columns, logs, strict=True))}
        keys = list(zip(self.columns.tolist(), self._log.tolist(), strict=True))
        mine = [i for i, key in enumerate(keys) if key in at]
        theirs = [at[keys[i]] for i in mine]
        for k in STATE_KEYS:
            self.state[k][mine] = state[k][theirs]
