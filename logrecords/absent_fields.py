"""Records checked against the schema: fields a record lacks are counted, and refused past a share.

A parser reports which records lack which field (``Batch.absent``: the key absent or null). A
field the schema requires (a slot not ``optional``, or the event time) that a record lacks is
counted per field; once more than ``schema.max_absent_share`` of the records read lack it (over
at least ``schema.min_absent_records``, so that the first few records decide nothing), each record lacking it is
refused as ``absent_field`` with a detail naming the field, and goes to the dead letters like any
other bad record. A few absences are a log's noise and train with the default (0, no id); a field
most records lack is a schema that does not describe the log, which must not train silently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from logrecords.batch import Batch
from logrecords.rejects import Rejected, RejectReason
from logrecords.schema_config import SchemaConfig


class AbsentFieldCheck:
    """Counts the required fields each batch's records lack and refuses them past the schema's share."""

    def __init__(self, schema: SchemaConfig) -> None:
        optional = schema.optional_fields
        fields = schema.presence_fields
        self.fields = fields
        self._required = np.array([name not in optional for name in fields], dtype=bool)
        self.max_share = schema.max_absent_share
        self.min_records = schema.min_absent_records
        self.records = 0  # parsed records looked at (refused ones included)
        self.absent: Counter[str] = Counter()

    def check(self, batch: Batch, rejected: list[Rejected], values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
        """``batch`` without the records refused here, and ``rejected`` with them (input order kept);
        ``batch`` holds the records of ``values`` not in ``rejected``, in order."""
        if batch.absent is None or not len(batch) or not self._required.any():
            return batch, rejected
        absent = batch.absent & self._required
        self.records += len(batch)
        counts = absent.sum(axis=0)
        for j in np.flatnonzero(counts):
            self.absent[self.fields[j]] += int(counts[j])
        if self.max_share >= 1.0 or self.records < self.min_records:
            return batch, rejected
        over = np.array([self.absent[name] > self.max_share * self.records for name in self.fields], dtype=bool)
        refuse = absent & over
        rows = np.flatnonzero(refuse.any(axis=1))
        if not rows.size:
            return batch, rejected
        taken = np.zeros(len(values), dtype=bool)
        taken[[r.index for r in rejected]] = True
        index = np.flatnonzero(~taken)  # input index of each batch row
        refused = []
        for row in rows.tolist():
            name = self.fields[int(np.argmax(refuse[row]))]
            share = self.absent[name] / self.records
            refused.append(Rejected(int(index[row]), RejectReason.ABSENT_FIELD,
                                    f"field '{name}': absent, as from {share:.0%} of the {self.records} records read "
                                    f"(more than max_absent_share {self.max_share:g}): is it in the log, under this "
                                    f"name? Mark the slot optional if records may lack it", values[int(index[row])]))
        keep = np.ones(len(batch), dtype=bool)
        keep[rows] = False
        return batch.take(np.flatnonzero(keep)), sorted(rejected + refused, key=lambda r: r.index)
