"""An event time must be a finite number: NaN is refused like Infinity, absent stays allowed,
on the kernel's path (which leaves such literals to the reference parser) and the reference
path alike; the other records of the batch are kept."""

from __future__ import annotations

import numpy as np
import pytest

from logrecords.json_lines import JsonLinesParser
from logrecords.rejects import RejectReason
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind

SCHEMA = SchemaConfig(format="json", slots=(SlotConfig(name="user", kind=SlotKind.SPARSE, hash=HashKind.FNV1A),),
                      event_time="ts", user_id="user")
ROWS = [
    b'{"label": 1, "user": "a", "ts": 100}',
    b'{"label": 1, "user": "b", "ts": NaN}',
    b'{"label": 0, "user": "c"}',
    b'{"label": 0, "user": "d", "ts": -NaN}',
    b'{"label": 1, "user": "e", "ts": Infinity}',
    b'{"label": 0, "user": "f", "ts": -Infinity}',
    b'{"label": 1, "user": "g", "ts": 1e400}',
    b'{"label": 1, "user": "h", "ts": null}',
    b'{"label": 0, "user": "i", "ts": 200.5}',
]


@pytest.mark.parametrize("path", ["parse", "parse_reference"])
def test_a_nan_event_time_is_refused_like_infinity(path: str) -> None:
    batch, rejected = getattr(JsonLinesParser(SCHEMA), path)(ROWS)
    refused = {r.index for r in rejected}
    bad = {i for i, row in enumerate(ROWS) if b"NaN" in row or b"Infinity" in row or b"1e400" in row}
    # -NaN is no JSON at all: refused as invalid, the others as a bad event time
    assert refused == bad
    for r in rejected:
        want = RejectReason.INVALID_JSON if b"-NaN" in r.raw else RejectReason.SCHEMA
        assert r.reason is want, (r.raw, r.reason)
        if want is RejectReason.SCHEMA:
            assert "'ts'" in r.detail and "finite" in r.detail
    # every other record is kept, in order, an absent or null time as NaN
    assert len(batch) == len(ROWS) - len(bad) == 4
    assert batch.labels.tolist() == [1.0, 0.0, 1.0, 0.0]
    times = batch.event_time
    assert times is not None
    assert times[0] == 100.0 and np.isnan(times[1]) and np.isnan(times[2]) and times[3] == 200.5


def test_both_paths_agree_on_nan_event_times() -> None:
    parser = JsonLinesParser(SCHEMA)
    fast, fast_rejected = parser.parse(ROWS)
    ref, ref_rejected = parser.parse_reference(ROWS)
    assert [(r.index, r.reason) for r in fast_rejected] == [(r.index, r.reason) for r in ref_rejected]
    np.testing.assert_array_equal(fast.event_time, ref.event_time)
