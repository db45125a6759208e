"""The users' history table as trainers write it (trainer.history_join) and the service reads it
(service.user_history): its name, its row layout, and the ids the model's history slot reads."""

from __future__ import annotations

import numpy as np

from logrecords.schema_config import SchemaConfig
from tables.id_rows_kernels import ring_words

HISTORY_TABLE = "ids.history"
LOW56 = np.uint64((1 << 56) - 1)


def history_words(schema: SchemaConfig) -> int:
    """uint64 words of a history row: a ring of ``history.length`` (item id, time) entries."""
    assert schema.history is not None
    return ring_words(schema.history.length)


def slot_ids(schema: SchemaConfig, items: np.ndarray) -> np.ndarray:
    """History item ids as the history slot holds them: the item ids themselves (``embeddings:
    item``, their rows shared with the item tower) or re-keyed under the history's own slot id."""
    assert schema.history is not None
    if schema.history.embeddings == "item":
        return items
    return (items & LOW56) | (np.uint64(schema.history_slot_id()) << np.uint64(56))
