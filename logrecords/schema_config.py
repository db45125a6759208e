"""Typed configuration of a record: its slots (sparse and dense fields), hashing, label, event time
and the user history a two-tower model pools."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from core.yaml_config import FrozenModel

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

    name: str = Field(min_length=1)
    kind: SlotKind
    # Sparse only: the byte mixed into every id of this slot; defaults to the slot's rank.
    slot_id: int | None = Field(default=None, ge=0, le=MAX_SLOT_ID)
    hash: HashKind = HashKind.FNV1A
    # CSV only (sparse): the field holds many ids split on this character, e.g. "|" for "Action|Comedy".
    # JSON records hold lists natively, Parquet list columns too.
    separator: str | None = Field(default=None, min_length=1, max_length=1)

    @model_validator(mode="after")
    def _check(self) -> SlotConfig:
        if self.separator is not None and (self.kind is SlotKind.DENSE or not self.separator.isascii()):
            raise ValueError(f"slot '{self.name}': separator needs a sparse slot and one ASCII character")
        return self


class HistoryConfig(FrozenModel):
    """User behaviour history computed from the stream (#11, :mod:`trainer.history_join`): per
    user (the schema's ``user_id``), the last ``length`` items (``item_id``) of its records whose
    label is above ``positive_above``, with their event times, kept in the PS (the id-rows table
    ``ids.history``, evicted after ``ttl_passes`` passes without a new entry when set). Each record
    gets, as list slot ``slot`` (declare it in the model's user tower; it is no record field), the
    user's history as it stood strictly before the record's event time. ``embeddings``: the history
    ids read the item ids' own rows (``item``: shared with the item tower) or rows of their own
    (``own``: the ids re-keyed under the slot id ``slot_id``, by default the lowest one free)."""

    slot: str = Field("history", min_length=1)
    length: int = Field(50, ge=1, le=127)  # an id-rows row holds at most 1 + 2 x 127 words
    positive_above: float = 0.5
    embeddings: Literal["item", "own"] = "item"
    slot_id: int | None = Field(default=None, ge=0, le=MAX_SLOT_ID)
    ttl_passes: int | None = Field(default=None, ge=0)


class SchemaConfig(FrozenModel):
    """The record layout: a label, dense fields, sparse slots, optional event time and user/item ids.

    ``user_id`` and ``item_id`` name sparse slots; the batch then carries that slot's id per
    record, so the id the serving side indexes is the very feature id the tables train.
    """

    # criteo: TSV lines; json: JSON lines; csv: delimited text lines with a header row (files) or
    # ``columns`` (messages); parquet: files only, read column by column (logrecords.parquet_reader).
    format: Literal["criteo", "json", "csv", "parquet"] = "json"
    label: str = "label"
    slots: tuple[SlotConfig, ...] = ()
    event_time: str | None = None
    user_id: str | None = None
    item_id: str | None = None
    # csv only: the field delimiter, and the column names of header-less records (Kafka messages);
    # a file's own header row, when present, maps its columns instead.
    delimiter: str = Field(default=",", min_length=1, max_length=1)
    columns: tuple[str, ...] = ()
    history: HistoryConfig | None = None  # the users' recent positive items as a list slot (HistoryConfig)

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
        if self.format == "criteo" and (
            len(self.dense_names) != CRITEO_DENSE or len(self.sparse_slots) != CRITEO_SPARSE
        ):
            raise ValueError(f"criteo format needs {CRITEO_DENSE} dense and {CRITEO_SPARSE} sparse slots")
        return self

    @property
    def dense_names(self) -> list[str]:
        return [s.name for s in self.slots if s.kind is SlotKind.DENSE]

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
