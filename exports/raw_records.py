"""A record's own field values -> the model's hashed features, with the job's schema.

A client sends what its log holds, ``{"user_id": 259, "age": "18-24", "genres": ["Comedy",
"Drama"]}``, instead of ``slot_id << 56 | fnv1a(...)`` ids. The values are hashed by the
ingestion parser itself (``logrecords.json_lines.JsonLinesParser`` under the job's schema, which
the bundle carries: exports.bundle), so slot ids, hash kinds (fnv1a, int, hex) and the value
types a slot takes are exactly what training saw: a sparse field is a string or an integer, or
a list of them; a dense field a number; a slot with a CSV ``separator`` also takes the joined
text (``"Comedy|Drama"``), split as the CSV parser splits it (empty pieces skipped). A field the
caller needs (the model's inputs) that a record lacks (absent or null) is refused, unless its slot
is ``optional``: then it holds no id (dense: 0), as in a record, and the answer names it as a default.

Every problem is an ``InvalidInput`` naming the record and the field: an unknown field, a value
of the wrong type, a value its hash kind cannot take (``"x"`` in an ``int`` slot, an int past
2**56), and, for requests in hashed form, an id whose top byte is another slot's.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from core.errors import InvalidInput
from logrecords.batch import Batch
from logrecords.hashing import LOW_MASK, slot_of
from logrecords.json_lines import JsonLinesParser
from logrecords.schema_config import HashKind, SchemaConfig

_NO_LIMIT = 1 << 62  # message size: the service's own body limit applies before this
# a field's value is a scalar or a list of them; far deeper nesting is refused before the JSON
# encoder recurses into it (past ~950 levels it raises RecursionError)
MAX_VALUE_DEPTH = 32


def nested_past(value: Any, limit: int) -> bool:
    """Whether lists and objects in ``value`` nest more than ``limit`` levels deep (without
    recursion, and looking at the scalars of a level only through their types)."""
    level = [value]
    for _ in range(limit + 1):
        kinds = set(map(type, level))
        if list not in kinds and dict not in kinds:
            return False
        inner: list[Any] = []
        for v in level:
            if type(v) is list:
                inner.extend(v)
            elif type(v) is dict:
                inner.extend(v.values())
        level = inner
    return True


class RecordHasher:
    """Raw field values of one job's records -> instance dicts of final feature ids."""

    def __init__(self, schema: SchemaConfig) -> None:
        self.schema = schema
        # requests are JSON whatever the topic's format: parse them as JSON lines of the same slots
        self._parser = JsonLinesParser(schema.model_copy(update={"format": "json"}), max_message_bytes=_NO_LIMIT)
        self.slot_ids = schema.slot_ids()
        self._separator = {s.name: s.separator for s in schema.sparse_slots if s.separator}
        fields = [schema.label_field, *schema.dense_names, *self.slot_ids]
        if schema.event_time is not None:
            fields.append(schema.event_time)
        self.fields = tuple(dict.fromkeys(fields))
        self._parser.parse([json.dumps(self._as_record({})).encode()])  # its kernel loads here, not on a request

    def instances(self, records: Sequence[Mapping[str, Any]], where: Sequence[str], *, slots: Sequence[str],
                  needs: Collection[str] = ()) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
        """``{"label", "dense", "slots": {name: [ids]}}`` per record (``slots``: the model's slot
        names; the schema's other slots are dropped), and ``where[i]`` -> the optional fields of
        ``needs`` record i lacked (their defaults were used). A record lacking a field of ``needs``
        that is not optional is refused, naming it. ``where[i]`` names record i in errors."""
        lines = []
        for record, at in zip(records, where, strict=True):
            unknown = [k for k in record if k not in self.fields]
            if unknown:
                raise InvalidInput(f"{at}.{unknown[0]}: unknown field; the schema's fields are {list(self.fields)}",
                                   detail={"field": f"{at}.{unknown[0]}", "fields": list(self.fields)})
            for name, value in record.items():
                if type(value) in (list, dict) and nested_past(value, MAX_VALUE_DEPTH):
                    raise InvalidInput(f"{at}.{name}: value nested more than {MAX_VALUE_DEPTH} levels deep (a field "
                                       f"holds a string, a number or a list of them)",
                                       detail={"field": f"{at}.{name}", "max_depth": MAX_VALUE_DEPTH})
            lines.append(json.dumps(self._as_record(record)).encode())
        batch, rejected = self._parser.parse(lines)
        if rejected:
            r = rejected[0]
            raise InvalidInput(f"{where[r.index]}: {r.detail}", detail={"record": where[r.index],
                                                                        "reason": r.reason.value})
        defaults = self._defaults(batch, where, needs)
        keep = [s for s in slots if s in batch.slots]
        out = []
        for i in range(len(records)):
            ids = {}
            for name in keep:
                flat, offsets = batch.slots[name]
                ids[name] = flat[offsets[i]: offsets[i + 1]].tolist()
            out.append({"label": float(batch.labels[i]), "dense": batch.dense[i].tolist(), "slots": ids})
        return out, defaults

    def _defaults(self, batch: Batch, where: Sequence[str], needs: Collection[str]) -> dict[str, list[str]]:
        """Raise for the first needed required field a record lacks; the optional ones each lacked."""
        fields = self.schema.presence_fields
        needed = np.array([name in needs for name in fields], dtype=bool)
        if batch.absent is None or not needed.any():
            return {}
        optional = self.schema.optional_fields
        required = needed & np.array([name not in optional for name in fields], dtype=bool)
        lacking = batch.absent & required
        if lacking.any():
            i, j = (int(k) for k in np.argwhere(lacking)[0])
            raise InvalidInput(f"{where[i]}.{fields[j]}: absent, and the model reads it; send it (the slot may be "
                               f"marked optional in the schema, to score with its default)",
                               detail={"field": f"{where[i]}.{fields[j]}", "absent": [fields[k] for k in
                                                                                     np.flatnonzero(lacking[i])]})
        used = batch.absent & needed
        return {where[i]: [fields[j] for j in np.flatnonzero(used[i])] for i in np.flatnonzero(used.any(axis=1))}

    def values(self, slot: str, values: Sequence[Any], where: str) -> np.ndarray:
        """Feature ids of one slot's raw values, in order (``where``: the request field)."""
        if slot not in self.slot_ids:
            raise InvalidInput(f"{where}: {slot!r} is not a sparse field of the schema; its sparse fields are "
                               f"{list(self.slot_ids)}", detail={"field": where, "slots": list(self.slot_ids)})
        if values and slot not in self._separator:
            at_once = self._values_at_once(slot, values)
            if at_once is not None:
                return at_once
        out, _ = self.instances([{slot: v} for v in values], [f"{where}[{i}]" for i in range(len(values))],
                                slots=[slot])
        counts = [len(o["slots"][slot]) for o in out]
        if any(c != 1 for c in counts):
            i = next(i for i, c in enumerate(counts) if c != 1)
            raise InvalidInput(f"{where}[{i}]: one value per entry, got {values[i]!r}", detail={"field": where})
        return np.array([o["slots"][slot][0] for o in out], np.uint64)

    def _values_at_once(self, slot: str, values: Sequence[Any]) -> np.ndarray | None:
        """The values hashed as one record's list: one parse, not one per value (1,000 excluded items
        took 12.6 ms record by record). None where that parse refuses them or a value is not one id:
        the per-value path then names the bad entry. A slot with a separator is never asked, since
        there a text value is itself a joined list and a list's items are not split."""
        if any(isinstance(v, list | dict) for v in values):
            return None
        batch, rejected = self._parser.parse([json.dumps(self._as_record({slot: list(values)})).encode()])
        if rejected:
            return None
        flat, _ = batch.slots[slot]
        return flat.astype(np.uint64) if flat.shape[0] == len(values) else None

    def raw_values(self, slot: str, ids: np.ndarray) -> list[str | int | None]:
        """The field value behind each id of ``slot`` where its hash reads backwards (``int``: the
        number, ``hex``: its lowercase text); None for an ``fnv1a`` slot, or an id of another slot."""
        want = self.slot_ids.get(slot)
        kind = next((s.hash for s in self.schema.sparse_slots if s.name == slot), None)
        if want is None or kind not in (HashKind.INT, HashKind.HEX):
            return [None] * int(ids.shape[0])
        low = (ids & np.uint64(LOW_MASK)).tolist()
        ours = (slot_of(ids) == want).tolist()
        if kind is HashKind.INT:
            return [v if ok else None for v, ok in zip(low, ours, strict=True)]
        return [format(v, "x") if ok else None for v, ok in zip(low, ours, strict=True)]

    def check_ids(self, slot: str, ids: np.ndarray, where: str) -> None:
        """Hashed ids of a schema slot must carry its slot id in their top byte."""
        want = self.slot_ids.get(slot)
        if want is None or not ids.shape[0]:
            return
        got = slot_of(ids)
        bad = np.flatnonzero(got != want)
        if bad.shape[0]:
            i = int(bad[0])
            raise InvalidInput(f"{where}: id {int(ids[i])} is outside slot {slot!r} (its top byte is {int(got[i])}, "
                               f"the slot's id is {want})", detail={"field": where, "slot_id": want})

    def _as_record(self, record: Mapping[str, Any]) -> dict[str, Any]:
        rec = dict(record)
        rec.setdefault(self.schema.label_field, 0)
        for name, sep in self._separator.items():
            v = rec.get(name)
            if isinstance(v, str):
                rec[name] = [p for p in v.split(sep) if p]
        return rec


def record_hasher(schema: Mapping[str, Any] | None) -> RecordHasher | None:
    """The hasher of a bundle's schema (None for bundles that carry none)."""
    return None if schema is None else RecordHasher(SchemaConfig.model_validate(schema))
