"""RecordHasher.values hashes a list of one field's values in one parse (a recommend request may
exclude thousands of items): the ids, their order and every refusal are the per-value path's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from core.errors import InvalidInput
from exports.raw_records import RecordHasher
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind

SCHEMA = SchemaConfig(format="json", label="liked", item_id="movie_id",
                      slots=(SlotConfig(name="movie_id", kind=SlotKind.SPARSE, hash=HashKind.INT),
                             SlotConfig(name="title", kind=SlotKind.SPARSE, hash=HashKind.FNV1A),
                             SlotConfig(name="tag", kind=SlotKind.SPARSE, hash=HashKind.HEX),
                             SlotConfig(name="genres", kind=SlotKind.SPARSE, separator="|")))


def _one_by_one(h: RecordHasher, slot: str, values: list[Any]) -> np.ndarray:
    """The reference: each value as a record of its own."""
    out, _ = h.instances([{slot: v} for v in values], [f"v[{i}]" for i in range(len(values))], slots=[slot])
    assert all(len(o["slots"][slot]) == 1 for o in out)
    return np.array([o["slots"][slot][0] for o in out], np.uint64)


@pytest.mark.parametrize(("slot", "make"), [
    ("movie_id", lambda rng, n: [int(x) for x in rng.integers(0, 1 << 40, n)]),
    ("title", lambda rng, n: [f"film {int(x)} é" if x % 3 else int(x) for x in rng.integers(0, 500, n)]),
    ("tag", lambda rng, n: [f"{int(x):x}" for x in rng.integers(0, 1 << 50, n)]),
])
def test_many_values_hash_as_each_value_alone(slot: str, make: Any) -> None:
    h = RecordHasher(SCHEMA)
    values = make(np.random.default_rng(3), 2_000)
    values += values[:50]  # duplicates keep their places
    ids = h.values(slot, values, "v")
    assert ids.dtype == np.uint64
    at_once = h._values_at_once(slot, values)  # the one-parse path itself, not a fallback
    assert at_once is not None
    np.testing.assert_array_equal(at_once, ids)
    np.testing.assert_array_equal(ids, _one_by_one(h, slot, values))


@pytest.mark.parametrize(("slot", "values", "named"), [
    ("movie_id", [1, 2, "x", 4], "v[2]"),  # not an int
    ("movie_id", [1, 2, 3, 1 << 56], "v[3]"),  # past the slot's 56 bits
    ("movie_id", [5, [6, 7], 8], "v[1]"),  # a list is no single value
    ("title", ["a", None, "b"], "v[1]"),  # no value at all
    ("tag", ["ff", "zz"], "v[1]"),  # not hex
    ("genres", ["Drama", "Drama|Comedy"], "v[1]"),  # joined text is two values here
])
def test_a_bad_value_among_many_is_named_by_its_place(slot: str, values: list[Any], named: str) -> None:
    with pytest.raises(InvalidInput, match=named.replace("[", r"\[").replace("]", r"\]")):
        RecordHasher(SCHEMA).values(slot, values, "v")


def test_a_separator_slot_keeps_its_per_value_meaning() -> None:
    h = RecordHasher(SCHEMA)
    np.testing.assert_array_equal(h.values("genres", ["Drama", "Comedy"], "v"),
                                  _one_by_one(h, "genres", ["Drama", "Comedy"]))


def test_records_with_escaped_text_keep_their_order() -> None:
    """JSON escapes non-ASCII text; such a record takes the parser's reference path, whose rows the
    ingestion kernel puts last: a request's records must come back in the order sent."""
    h = RecordHasher(SCHEMA)
    records = [{"movie_id": 1, "title": "a"}, {"movie_id": 2, "title": "é"}, {"movie_id": 3, "title": "b"}]
    out, _ = h.instances(records, ["r0", "r1", "r2"], slots=["movie_id", "title"])
    assert [o["slots"]["movie_id"] for o in out] == [h.values("movie_id", [i], "v").tolist() for i in (1, 2, 3)]
    assert [o["slots"]["title"] for o in out] == [h.values("title", [t], "v").tolist() for t in ("a", "é", "b")]
