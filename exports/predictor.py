"""Scoring with a trained model outside training: what the service (and infer mode) uses.

``Predictor(model_config, dense, lookup)`` rebuilds the model from the config dict a bundle
carries, loads its dense weights, and reads embedding rows through ``lookup(table, keys)``
(uint64 keys -> float32 rows (n, width), width = the table's row width, wide weight first
when the model has one). For ids the lookup does not know, return zeros: that is what an
evicted id (a tombstone in a delta bundle) means to the model. Returning the table's
initializer row is also valid (it is what the trainer's own pulls see); both are tiny.

``instances_to_batch`` turns JSON instances ``{"label"?: 0/1, "dense": [...], "slots":
{name: [ids...]}}`` into a ``Batch``. Ids are final feature ids (integers, as trained and as
the item vectors are keyed); a record's own field values become such instances through
``exports.raw_records`` (the ingestion parser under the job's schema).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from core.errors import InvalidInput
from logrecords.batch import Batch
from models import build_model
from models.features import Features
from models.model_config import ModelType

Lookup = Callable[[str, np.ndarray], np.ndarray]


class Predictor:
    def __init__(self, model_config: dict[str, Any], dense: dict[str, np.ndarray], lookup: Lookup) -> None:
        self.model = build_model(model_config)
        self.model.params.load(dense)
        self.config = self.model.config
        self.lookup = lookup

    @property
    def tables(self) -> dict[str, int]:
        """Sparse table name -> row width the lookup must return."""
        return dict(self.model.row_width)

    def _rows(self, f: Features) -> dict[str, np.ndarray]:
        rows = {}
        for t, ti in f.tables.items():
            got = np.asarray(self.lookup(t, ti.keys), np.float32)
            if got.shape != (ti.keys.shape[0], self.model.row_width[t]):
                raise InvalidInput(f"lookup({t!r}) returned {got.shape}, expected "
                                   f"({ti.keys.shape[0]}, {self.model.row_width[t]})")
            rows[t] = got
        return rows

    def predict(self, batch: Batch) -> np.ndarray:
        """Click probabilities float32[n]."""
        f = self.model.features(batch)
        z = self.model.forward(f, self._rows(f))
        return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)

    def _two_tower(self) -> Any:
        if self.config.type is not ModelType.TWO_TOWER:
            raise InvalidInput(f"vectors need a two_tower model, this one is {self.config.type.value}")
        return self.model

    def user_vectors(self, batch: Batch) -> np.ndarray:
        """Query vectors float32[n, tower_dim] from the user slots and dense inputs ([u, 1]: one more
        column with ``retrieval.item_bias``, models.two_tower.served_dim)."""
        m = self._two_tower()
        from models.features import build_features

        f = build_features(self.config, batch, m.user_slots)
        return np.ascontiguousarray(m.user_vectors(f, self._rows(f)), np.float32)

    def item_vectors(self, batch: Batch) -> np.ndarray:
        """Item vectors float32[n, tower_dim] from the item slots only ([v, temperature * b] with
        ``retrieval.item_bias``)."""
        m = self._two_tower()
        from models.features import build_features

        f = build_features(self.config, batch, m.item_slots)
        return np.ascontiguousarray(m.item_vectors(f, self._rows(f)), np.float32)


def _slot_ids(name: str, values: Sequence[Any], where: str) -> np.ndarray:
    try:
        ids = np.array(values, dtype=np.uint64) if len(values) else np.empty(0, np.uint64)
    except (ValueError, TypeError, OverflowError):
        raise InvalidInput(f"{where}: slot {name!r} ids must be non-negative integers, got {values!r}") from None
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise InvalidInput(f"{where}: slot {name!r} ids must be integers, got {values!r}")
    return ids


def instances_to_batch(instances: Sequence[dict[str, Any]], *, slots: Sequence[str], n_dense: int) -> Batch:
    """A Batch of JSON instances (see the module docstring); the error names the instance and field."""
    n = len(instances)
    labels = np.zeros(n, np.float32)
    dense = np.zeros((n, n_dense), np.float32)
    per_slot: dict[str, list[np.ndarray]] = {s: [] for s in slots}
    for i, inst in enumerate(instances):
        where = f"instance {i}"
        if not isinstance(inst, dict):
            raise InvalidInput(f"{where}: must be an object, got {type(inst).__name__}")
        unknown = set(inst) - {"label", "dense", "slots"}
        if unknown:
            raise InvalidInput(f"{where}: unknown fields {sorted(unknown)}")
        label = inst.get("label", 0)
        if isinstance(label, bool) or not isinstance(label, int | float) or not 0 <= label <= 1:
            raise InvalidInput(f"{where}: label must be a number in [0, 1], got {label!r}")
        labels[i] = label
        d = inst.get("dense", [])
        if not isinstance(d, list) or len(d) > n_dense or \
                any(isinstance(v, bool) or not isinstance(v, int | float) for v in d):
            raise InvalidInput(f"{where}: dense must be a list of at most {n_dense} numbers, got {d!r}")
        dense[i, : len(d)] = d
        s = inst.get("slots", {})
        if not isinstance(s, dict):
            raise InvalidInput(f"{where}: slots must be an object of name -> list of ids")
        extra = set(s) - set(slots)
        if extra:
            raise InvalidInput(f"{where}: unknown slots {sorted(extra)} (model slots: {list(slots)})")
        for name in slots:
            v = s.get(name, [])
            v = v if isinstance(v, list) else [v]
            per_slot[name].append(_slot_ids(name, v, where))
    out = {}
    for name, parts in per_slot.items():
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum([p.shape[0] for p in parts], out=offsets[1:])
        out[name] = (np.concatenate(parts) if parts else np.empty(0, np.uint64), offsets)
    return Batch(labels=labels, dense=dense, slots=out)
