"""Whether a file's dense values fit what the model reads: ``config check --data`` and ``up --replay`` warn
when a sample's magnitude is far outside it (a raw timestamp or id left as a dense input, say)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from logrecords.dense_transform import FLAT_LOG_SPAN, Log1pTransform
from logrecords.file_formats import FileReader
from logrecords.schema_config import SchemaConfig, SlotKind

SAMPLE_RECORDS = 1000
RAW_LARGE = 1e3  # without log1p, an input of this size outweighs every unit-scale embedding it is summed with


def dense_warnings(schema: SchemaConfig, *, dense_log1p: bool, path: str | Path,
                   records: int = SAMPLE_RECORDS) -> list[str]:
    """One warning per dense field of the first ``records`` records of ``path`` whose values the model's input
    (``log1p(max(x, 0))`` or the raw value) cannot tell apart or overweights; [] when every field fits. A field
    whose ``transform`` is standardize or none is scaled by it and never warned about."""
    if not schema.dense_names:
        return []
    block = next(iter(FileReader(schema).blocks(path, records)), None)
    if block is None:
        return []
    dense = block.parse()[0].dense
    out = []
    fields = [s for s in schema.slots if s.kind is SlotKind.DENSE]
    for j, field in enumerate(fields):
        col = dense[:, j].astype(np.float64)
        if not col.size or not isinstance(field.transform, Log1pTransform):
            continue
        name = field.name
        lo, hi = float(col.min()), float(col.max())
        # a value of at most 1 (a constant 0/1 flag) is no time, year or id, however narrow its span
        if (dense_log1p and lo > 0 and hi > 1
                and math.log1p(hi) - math.log1p(lo) < FLAT_LOG_SPAN * math.log1p(hi)):
            out.append(f"dense field '{name}': the sample's values are {lo:.4g} .. {hi:.4g}, which the model's "
                       f"log1p(max(x, 0)) reads as {math.log1p(lo):.2f} .. {math.log1p(hi):.2f}, nearly one value: "
                       "a time (schema.event_time), a year or an id (a sparse slot)?")
        elif dense_log1p and hi <= 0 and lo < 0:
            out.append(f"dense field '{name}': the sample's values are {lo:.4g} .. {hi:.4g}, all of which the "
                       "model's log1p(max(x, 0)) reads as 0")
        elif not dense_log1p and max(abs(lo), abs(hi)) > RAW_LARGE:
            out.append(f"dense field '{name}': the sample's values reach {max(abs(lo), abs(hi)):.4g}, which the "
                       "model reads raw (dense_log1p: false) beside unit-scale embeddings")
    return out
