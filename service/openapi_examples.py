"""/openapi.json's request examples, made when it is fetched from the bundle being served: its
slot names, ids that have a row in its tables, items in its index and, where the schema's hash
can be read backwards (``hex`` and ``int`` slots), the raw field values behind those ids. So
"Try it out" in /docs answers 200 with real rows, items and scores on whatever data the job
trains. The routes keep fixed examples of the same shape for when no bundle is served yet.

An ``fnv1a`` slot's values cannot be recovered from its ids: a raw record leaves such a field out
when the schema marks it optional, and there is no raw record when it is required (the API refuses
a request that lacks a required field the model reads).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from fastapi import FastAPI

from core.errors import Unavailable
from logrecords.hashing import LOW_MASK, SLOT_SHIFT
from logrecords.schema_config import HashKind
from models.model_config import ModelType, Tower
from service.model_store import Side

_IDS_PER_SLOT = 3
_K = 10
_Examples = dict[str, dict[str, Any]]  # example name -> {"summary": ..., "value": ...}


def install_openapi_examples(app: FastAPI) -> None:
    """``app.openapi`` answers FastAPI's cached document with the served bundle's examples filled in."""
    document = app.openapi  # FastAPI's own: builds the document once, then returns it

    def openapi() -> dict[str, Any]:
        store = getattr(app.state, "store", None)  # None outside the lifespan (the document alone)
        if store is None:
            return document()
        try:
            with store.read() as side:
                examples = BundleExamples(side, max_k=app.state.settings.limits.max_k)
                return examples.filled(document())
        except Unavailable:  # no bundle yet: the routes' fixed examples
            return document()

    app.openapi = openapi


class BundleExamples:
    """Example requests of every feature endpoint, from one served side."""

    def __init__(self, side: Side, *, max_k: int) -> None:
        self.side = side
        self.k = min(_K, max_k)
        model, records = side.model, side.records
        self.slot_ids = records.slot_ids if records is not None else {}
        self.hash_kinds = {s.name: s.hash for s in records.schema.sparse_slots} if records is not None else {}
        self.optional = records.schema.optional_fields if records is not None else set()
        # a required dense field goes into a raw record at 0 (its value in a record that lacks it)
        dense = records.schema.dense_names if records is not None and model and model.n_dense else []
        self.dense_fields = [name for name in dense if name not in self.optional]
        # the slots a request names: with a schema, its fields (the history slot is the service's own)
        specs = [s for s in model.slots if records is None or s.name in self.slot_ids] if model is not None else []
        self.slots = [s.name for s in specs]
        two_tower = model is not None and model.type == ModelType.TWO_TOWER
        self.user_slots = [s.name for s in specs if not two_tower or s.tower is Tower.USER]
        found = {s.name: self._ids_of(s.name) for s in specs}
        self.ids = {name: ids for name, ids in found.items() if ids}  # slot -> ids with a row
        items = side.items
        self.item_ids = [int(i) for i in items.pos_ids[:_IDS_PER_SLOT]] if items is not None and items.size else []

    def _ids_of(self, slot: str) -> list[int]:
        _, shards = self.side.table_of(slot)
        top = self.slot_ids.get(slot)
        found: list[int] = []
        for shard in shards:
            found += [int(i) for i in shard.stored_keys(_IDS_PER_SLOT - len(found), top_byte=top)]
            if len(found) == _IDS_PER_SLOT:
                break
        return found

    def raw_value(self, slot: str, feature_id: int) -> str | int | None:
        """The field value that hashes to ``feature_id``, where the slot's hash can be read backwards."""
        kind = self.hash_kinds.get(slot)
        if kind is None or feature_id >> SLOT_SHIFT != self.slot_ids[slot]:
            return None
        if kind is HashKind.HEX:
            return format(feature_id & LOW_MASK, "x")
        if kind is HashKind.INT:
            return feature_id & LOW_MASK
        return None

    def _raw_record(self, slots: list[str]) -> dict[str, Any] | None:
        """A record of raw values for ``slots`` (required dense fields at 0; an optional field with
        no value to show left out), or None when a required one has none: a request lacking a
        field the model reads and the schema requires is refused."""
        record: dict[str, Any] = dict.fromkeys(self.dense_fields, 0.0)
        for slot in slots:
            value = self.raw_value(slot, self.ids[slot][0]) if slot in self.ids else None
            if value is not None:
                record[slot] = value
            elif slot not in self.optional:
                return None
        return record if set(record) - set(self.dense_fields) else None

    def _item_value(self) -> str | int | None:
        item_slot = self.side.records.schema.item_id if self.side.records is not None else None
        return self.raw_value(item_slot, self.item_ids[0]) if item_slot and self.item_ids else None

    def lookup(self) -> _Examples:
        out: _Examples = {}
        slot = next(iter(self.ids), None)
        if slot is not None:
            out["hashed"] = {"summary": f"feature ids of slot {slot} with a row in bundle {self.side.version}",
                             "value": {"slot": slot, "ids": self.ids[slot]}}
        raw = {s: [v for v in (self.raw_value(s, i) for i in ids) if v is not None] for s, ids in self.ids.items()}
        raw_slot = next((s for s, values in raw.items() if values), None)
        if raw_slot is not None:
            out["raw"] = {"summary": f"values of field {raw_slot}, hashed with bundle {self.side.version}'s schema",
                          "value": {"slot": raw_slot, "values": raw[raw_slot]}}
        return out

    def row_parameters(self) -> dict[str, _Examples]:
        slot = next(iter(self.ids), None)
        if slot is None:
            return {}
        return {"slot": {"served": {"summary": "a slot of the served model", "value": slot}},
                "id": {"served": {"summary": f"an id of slot {slot} with a row", "value": self.ids[slot][0]}}}

    def predict(self) -> _Examples:
        out: _Examples = {}
        if self.ids:
            out["hashed"] = {"summary": "one id per slot, each with a row in the served tables",
                             "value": {"instances": [{"slots": {s: ids[:1] for s, ids in self.ids.items()}}]}}
        record = self._raw_record(self.slots)
        if record:
            out["raw"] = {"summary": "field values the served schema hashes to ids with rows",
                          "value": {"instances": [record]}}
        return out

    def recommend(self) -> _Examples:
        if not self.item_ids:
            return {}
        out: _Examples = {}
        user = {s: self.ids[s][:1] for s in self.user_slots if s in self.ids}
        if user:
            out["hashed"] = {"summary": "a user of ids with rows; one served item excluded",
                             "value": {"user": {"slots": user}, "k": self.k, "exclude": self.item_ids[:1]}}
        record = self._raw_record(self.user_slots)
        if record:
            value: dict[str, Any] = {"user": record, "k": self.k}
            item = self._item_value()
            if item is not None:
                value["exclude_values"] = [item]
            out["raw"] = {"summary": "the user's own field values (hashed with the served schema)", "value": value}
        return out

    def similar_parameters(self) -> dict[str, _Examples]:
        if not self.item_ids:
            return {}
        examples: _Examples = {"hashed": {"summary": "an item of the served index", "value": str(self.item_ids[0])}}
        item = self._item_value()
        if item is not None:
            examples["raw"] = {"summary": "the item field's value of that item (with raw=true)", "value": str(item)}
        return {"item_id": examples}

    def search(self) -> _Examples:
        items = self.side.items
        if items is None or not items.size:
            return {}
        vector = [round(float(v), 4) for v in np.asarray(items.vectors[0], np.float32)]
        return {"item": {"summary": f"the vector of item {int(items.pos_ids[0])}: items like it",
                         "value": {"vector": vector, "k": self.k}}}

    def filled(self, document: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``document`` whose examples are these, where the bundle gives any (a fixed
        example left beside them would not answer on this bundle)."""
        out = copy.deepcopy(document)
        paths = out.get("paths", {})
        for path, body in (("/v1/embeddings:lookup", self.lookup()), ("/v1/predict", self.predict()),
                           ("/v1/recommend", self.recommend()), ("/v1/search", self.search())):
            if body and path in paths:
                content = paths[path]["post"]["requestBody"]["content"]["application/json"]
                content["examples"] = body
        for path, params in (("/v1/embeddings/{slot}/{id}", self.row_parameters()),
                             ("/v1/items/{item_id}/similar", self.similar_parameters())):
            for parameter in paths.get(path, {}).get("get", {}).get("parameters", []):
                if parameter["name"] in params:
                    parameter["examples"] = params[parameter["name"]]
        return out
