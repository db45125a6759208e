"""Typed configuration of a record: its slots (sparse and dense fields), hashing, label, event time
and the user history a two-tower model pools."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from core.yaml_config import FrozenModel
from logrecords.dense_transform import DenseTransform, Log1pTransform

# Slot ids live in the top byte of every sparse feature id (see logrecords.hashing).
MAX_SLOT_ID = 255


class SlotKind(StrEnum):
    DENSE = "dense"
    SPARSE = "sparse"


class HashKind(StrEnum):
    """How a sparse value's text becomes a 56-bit id (the slot id fills the top 8 bits).

    fnv1a: 64-bit FNV-1a of the UTF-8 text, avalanched, low 56 bits (any string).
    hex:   the text read as a hexadecimal number, lossless up to 14 digits (Criteo categoricals).
    int:   the text read as a non-negative decimal integer below 2**56, lossless.
    """

    FNV1A = "fnv1a"
    HEX = "hex"
    INT = "int"


class SlotConfig(FrozenModel):
    """One input field: a dense float, or a sparse slot holding one or many ids."""

    name: str = Field(min_length=1,
                      description="The record field this slot reads (a JSON key, a CSV column, a Criteo position's "
                                  "name).")
    kind: SlotKind = Field(description="`dense` (one float) or `sparse` (one or many hashed ids).")
    slot_id: int | None = Field(default=None, ge=0, le=MAX_SLOT_ID,
                                description="Sparse only: the byte in the top of every id of this slot; left out, the "
                                            "lowest one not declared.")
    hash: HashKind = Field(HashKind.FNV1A,
                           description="How a sparse value becomes a 56-bit id: `fnv1a` (any text), `hex` "
                                       "(hexadecimal text) or `int` (a decimal integer).")
    separator: str | None = Field(default=None, min_length=1, max_length=1,
                                  description="CSV sparse slots only: the character a field's many ids are split on, "
                                              "e.g. `|` (JSON and Parquet hold lists).")
    optional: bool = Field(False,
                           description="A record may lack this field: its absence (dense 0, no id) is neither counted "
                                       "nor refused, and the API scores a request without it, naming the default it "
                                       "used. Left false, a record lacking it is counted per field and, past "
                                       "`max_absent_share`, refused.")
    transform: DenseTransform = Field(
        Log1pTransform(),
        description="Dense only: how the value becomes a model input, in training and serving alike: "
                    "`{kind: log1p}` (log1p(max(x, 0)), the default), `{kind: standardize, mean, std}` "
                    "((x - mean) / std clipped to +-`clip`; with `log: true`, of log1p(max(x, 0)), for a long "
                    "right tail; training keeps running statistics, started from mean and std as from "
                    "`prior_count` values, and uses and exports those: what `schema infer` proposes) or "
                    "`{kind: none}` (x clipped to +-`limit`, a rate in [0, 1]).")

    @model_validator(mode="after")
    def _check(self) -> SlotConfig:
        if self.separator is not None and (self.kind is SlotKind.DENSE or not self.separator.isascii()):
            raise ValueError(f"slot '{self.name}': separator needs a sparse slot and one ASCII character")
        if self.kind is SlotKind.SPARSE and not isinstance(self.transform, Log1pTransform):
            raise ValueError(f"slot '{self.name}': transform needs a dense slot")
        return self


class HistoryConfig(FrozenModel):
    """User behaviour history computed from the stream (:mod:`trainer.history_join`): per
    user (the schema's ``user_id``), the last ``length`` items (``item_id``) of its records whose
    label is above ``positive_above``, with their event times, kept in the PS (the id-rows table
    ``ids.history``, evicted after ``ttl_passes`` passes without a new entry when set). Each record
    gets, as list slot ``slot`` (declare it in the model's user tower; it is no record field), the
    user's history as it stood strictly before the record's event time. ``embeddings``: the history
    ids read the item ids' own rows (``item``: shared with the item tower) or rows of their own
    (``own``: the ids re-keyed under the slot id ``slot_id``, by default the lowest one free)."""

    slot: str = Field("history", min_length=1,
                      description="Name of the list slot the history becomes: declare it in the model's user tower, "
                                  "not in the records.")
    # an id-rows row holds at most 1 + 2 x 127 words
    length: int = Field(50, ge=1, le=127, description="Most recent positive items kept per user.")
    positive_above: float = Field(0.5,
                                  description="A record whose label is above this adds its item to the user's history.")
    embeddings: Literal["item", "own"] = Field(
        "item", description="`item`: the history ids read the item ids' own rows; `own`: rows of their own under "
                            "`slot_id`.")
    slot_id: int | None = Field(default=None, ge=0, le=MAX_SLOT_ID,
                                description="With `embeddings: own`, the slot id the history ids are re-keyed under; "
                                            "left out, the lowest one free.")
    ttl_passes: int | None = Field(default=None, ge=0,
                                   description="A user's history is evicted after this many passes without a new "
                                               "entry; left out, never.")


class LabelRule(FrozenModel):
    """A label derived from a numeric field: 1 where the field is at least ``at_least``, else 0
    (``{field: rating, at_least: 4}``: a 1-5 rating of 4 or 5 is a positive)."""

    field: str = Field(min_length=1, description="The numeric field the label is derived from, e.g. a rating.")
    at_least: float = Field(description="A record whose field is at least this is a positive (label 1), else 0.")


# a derived label's field may hold any number a float32 holds
_F32_MAX = 3.4028234663852886e38


class SchemaConfig(FrozenModel):
    """The record layout: a label, dense fields, sparse slots, optional event time and user/item ids.

    ``user_id`` and ``item_id`` name sparse slots; the batch then carries that slot's id per
    record, so the id the serving side indexes is the very feature id the tables train.
    """

    format: Literal["criteo", "json", "csv", "parquet"] = Field(
        "json", description="Record format: `json` lines, `criteo` TSV lines, `csv` (a header row or `columns`) or "
                            "`parquet` (files only).")
    label: str | LabelRule = Field(
        "label", description="The field holding the training label, a number in [0, 1]; or a label derived from a "
                             "numeric field, `{field: rating, at_least: 4}`: 1 where the field is at least "
                             "`at_least`, else 0.")
    slots: tuple[SlotConfig, ...] = Field((), description="The record's input fields: dense floats and sparse slots.")
    event_time: str | None = Field(None,
                                   description="The field holding the record's event time (its unit: "
                                               "`event_time_unit`); left out, none.")
    event_time_unit: Literal["s", "ms", "us", "ns", "iso8601"] = Field(
        "s", description="How the event time is written: a number of seconds, milliseconds, microseconds or "
                         "nanoseconds since the epoch, or `iso8601` date text (`2024-05-01T12:30:00Z`, an offset, "
                         "or none: UTC). A value that is none of these is refused naming the field.")
    user_id: str | None = Field(None,
                                description="The sparse slot whose id is the user (the user history, serving by user).")
    item_id: str | None = Field(None,
                                description="The sparse slot whose id is the item (the served catalogue and item "
                                            "index).")
    delimiter: str = Field(default=",", min_length=1, max_length=1, description="CSV only: the field delimiter.")
    columns: tuple[str, ...] = Field((),
                                     description="CSV only: the column names of header-less records (Kafka messages); "
                                                 "a file's own header row wins.")
    history: HistoryConfig | None = Field(None,
                                          description="The users' recent positive items as a user-tower list slot, "
                                                      "kept in the PS; left out, none.")
    max_absent_share: float = Field(
        0.5, ge=0.0, le=1.0,
        description="The share of records that may lack a required field (a slot not `optional`, or the event "
                    "time): a JSON key absent or null, an empty CSV cell or a short row, a Parquet null or missing "
                    "column. Each absence is counted per field. Once more than this share of the records read (at "
                    "least `min_absent_records`) lack a field, a record lacking it is refused and dead-lettered as "
                    "`absent_field`, naming the field. 1 never refuses.")
    min_absent_records: int = Field(
        100, ge=1,
        description="The records read before `max_absent_share` may refuse any, so that the first few records "
                    "of a log decide nothing.")

    @model_validator(mode="after")
    def _check(self) -> SchemaConfig:
        if not self.delimiter.isascii() or self.delimiter in "\"\r\n":
            raise ValueError(f"delimiter must be one ASCII character, not a quote or newline: {self.delimiter!r}")
        if any(s.separator == self.delimiter for s in self.slots):
            raise ValueError("a slot separator must differ from the delimiter")
        names = [s.name for s in self.slots]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate slot names: {sorted(dup)}")
        ids = [s.slot_id for s in self.slots if s.slot_id is not None]
        if len(ids) != len(set(ids)):
            raise ValueError("duplicate slot_id values")
        sparse = {s.name for s in self.slots if s.kind is SlotKind.SPARSE}
        if len(sparse) > MAX_SLOT_ID + 1:
            raise ValueError(f"at most {MAX_SLOT_ID + 1} sparse slots")
        for role in ("user_id", "item_id"):
            ref = getattr(self, role)
            if ref is not None and ref not in sparse:
                raise ValueError(f"{role} '{ref}' is not a declared sparse slot")
        if self.history is not None:
            if self.user_id is None or self.item_id is None:
                raise ValueError("history needs user_id and item_id")
            if self.history.slot in names:
                raise ValueError(f"history slot '{self.history.slot}' is made from the stream, not a record field")
        if self.format == "criteo" and isinstance(self.label, LabelRule):
            raise ValueError("criteo records hold a 0/1 label: a derived label needs json, csv or parquet")
        if self.format == "criteo" and (
            len(self.dense_names) != CRITEO_DENSE or len(self.sparse_slots) != CRITEO_SPARSE
        ):
            raise ValueError(f"criteo format needs {CRITEO_DENSE} dense and {CRITEO_SPARSE} sparse slots")
        return self

    @property
    def dense_names(self) -> list[str]:
        return [s.name for s in self.slots if s.kind is SlotKind.DENSE]

    @property
    def dense_transforms(self) -> tuple[DenseTransform, ...]:
        """Each dense field's transform, in dense order; () when every one is the default log1p."""
        out = tuple(s.transform for s in self.slots if s.kind is SlotKind.DENSE)
        return () if all(isinstance(t, Log1pTransform) for t in out) else out

    @property
    def label_field(self) -> str:
        """The record field the label is read from."""
        return self.label if isinstance(self.label, str) else self.label.field

    @property
    def label_bounds(self) -> tuple[float, float]:
        """The values the label field may hold: [0, 1], or any float32 number for a derived label."""
        return (0.0, 1.0) if isinstance(self.label, str) else (-_F32_MAX, _F32_MAX)

    @property
    def label_problem(self) -> str:
        """The reject detail of a record whose label field holds no valid value."""
        if isinstance(self.label, str):
            return f"field '{self.label}': label must be a number in [0, 1]"
        rule = self.label
        return f"field '{rule.field}': must be a number (the label is {rule.field} >= {rule.at_least:g})"

    def derive_labels(self, values: np.ndarray) -> np.ndarray:
        """The labels of the label field's values (float32): themselves, or 1 where at least the rule's bound."""
        if isinstance(self.label, str):
            return values.astype(np.float32)
        return (values >= self.label.at_least).astype(np.float32)

    @property
    def presence_fields(self) -> list[str]:
        """The fields whose absence a parser reports, in the columns of ``Batch.absent``: dense, event time, sparse."""
        time = [] if self.event_time is None else [self.event_time]
        return [*self.dense_names, *time, *(s.name for s in self.sparse_slots)]

    @property
    def optional_fields(self) -> set[str]:
        return {s.name for s in self.slots if s.optional}

    @property
    def sparse_slots(self) -> list[SlotConfig]:
        return [s for s in self.slots if s.kind is SlotKind.SPARSE]

    def slot_ids(self) -> dict[str, int]:
        """Slot id of every sparse slot: the declared one, else the lowest id not declared."""
        taken = {s.slot_id for s in self.sparse_slots if s.slot_id is not None}
        free = (i for i in range(MAX_SLOT_ID + 1) if i not in taken)
        return {s.name: s.slot_id if s.slot_id is not None else next(free) for s in self.sparse_slots}

    def history_slot_id(self) -> int:
        """The slot id under which ``history.embeddings: own`` keys the history ids."""
        assert self.history is not None
        if self.history.slot_id is not None:
            return self.history.slot_id
        taken = set(self.slot_ids().values())
        return next(i for i in range(MAX_SLOT_ID + 1) if i not in taken)

    @classmethod
    def criteo(cls, *, user_id: str | None = None, item_id: str | None = None) -> SchemaConfig:
        """The Criteo display-ads layout: I1..I13 dense integers, C1..C26 hex categoricals."""
        dense = [SlotConfig(name=f"I{i}", kind=SlotKind.DENSE) for i in range(1, CRITEO_DENSE + 1)]
        sparse = [
            SlotConfig(name=f"C{i}", kind=SlotKind.SPARSE, slot_id=i - 1, hash=HashKind.HEX)
            for i in range(1, CRITEO_SPARSE + 1)
        ]
        return cls(format="criteo", slots=(*dense, *sparse), user_id=user_id, item_id=item_id)


CRITEO_DENSE = 13
CRITEO_SPARSE = 26
