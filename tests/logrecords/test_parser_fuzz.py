"""Fuzzing every message parser (Criteo TSV, JSON lines, CSV lines) with random bytes and with
mutated valid records: a parser never raises; every record is either in the batch
or rejected once, with a reason and its own bytes; what is accepted is finite and in range; the
kernel path agrees with the reference path (JSON, CSV: ``parse_reference``; Criteo: a plain
Python reading of the line); memory stays bounded over the whole run. Each test is bounded by
hypothesis' ``max_examples``."""

from __future__ import annotations

import csv
import io
import json
import math
import resource
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logrecords.batch import Batch
from logrecords.criteo import CriteoParser
from logrecords.csv_lines import CsvLinesParser
from logrecords.generator import PlantedModel
from logrecords.json_lines import JsonLinesParser
from logrecords.rejects import Rejected, RejectReason
from logrecords.sample_encoding import criteo_lines
from logrecords.schema_config import SchemaConfig

from .test_json_lines_parser import canonical_rows as canonical

pytestmark = pytest.mark.slow

SCHEMA = {
    "label": "click", "event_time": "ts",
    "slots": [
        {"name": "price", "kind": "dense"}, {"name": "age", "kind": "dense"},
        {"name": "user", "kind": "sparse", "hash": "int"}, {"name": "item", "kind": "sparse", "hash": "hex"},
        {"name": "city", "kind": "sparse"}, {"name": "tags", "kind": "sparse", "separator": "|"},
    ],
}
JSON_SCHEMA = SchemaConfig.model_validate({**SCHEMA, "format": "json"})
COLUMNS = ("click", "ts", "price", "age", "user", "item", "city", "tags", "unused")
CSV_SCHEMA = SchemaConfig.model_validate({**SCHEMA, "format": "csv", "columns": list(COLUMNS)})
MAX_BYTES = 600
FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
RSS_GROWTH_MB = 300  # over a whole test: the parsers hold nothing between batches

PARSERS: dict[str, Callable[[], CriteoParser | JsonLinesParser | CsvLinesParser]] = {
    "criteo": lambda: CriteoParser(max_message_bytes=MAX_BYTES),
    "json": lambda: JsonLinesParser(JSON_SCHEMA, max_message_bytes=MAX_BYTES),
    "csv": lambda: CsvLinesParser(CSV_SCHEMA, max_message_bytes=MAX_BYTES),
}


def _valid(fmt: str, seed: int, n: int) -> list[bytes]:
    if fmt == "criteo":
        return list(criteo_lines(PlantedModel(seed=seed).sample(n)))
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        rec = {"click": int(rng.integers(0, 2)), "ts": 1.7e9 + k, "price": round(float(rng.uniform(-5, 500)), 2),
               "age": int(rng.integers(15, 90)), "user": int(rng.integers(0, 10**12)),
               "item": f"{int(rng.integers(0, 1 << 32)):x}", "city": ["Paris", "a,b", 'say "hi"', "東京"][k % 4],
               "tags": ["a", "b", "dd"][: k % 4], "unused": "z"}
        if fmt == "json":
            out.append(json.dumps(rec, ensure_ascii=k % 2 == 0).encode())
        else:
            buf = io.StringIO()
            csv.writer(buf, lineterminator="").writerow(["|".join(v) if isinstance(v, list) else v
                                                        for v in rec.values()])
            out.append(buf.getvalue().encode())
    return out


VALID = {fmt: _valid(fmt, 3, 40) for fmt in PARSERS}
HOSTILE = [b"", b"\n", b"\r\n", b"\x00" * 50, b"[" * 3000, b'{"click":' * 1500, b'{"click":1,"ts":1e400}',
           b'{"click":1,"price":1e39}', b'{"click":-0.0,"ts":-1e400}', b"\t" * 39, b"1" + b"\t" * 39,
           b"1e400\t" + b"\t" * 38, b'"' * 200, b"," * 8, b"0,1e400,1e39,-1e39,1,ff,x,a|b,z", "é€😀".encode(),
           b"\xed\xa0\x80", b"x" * (MAX_BYTES + 1), b"\xff" * 64, b"\\u0000", b"1,nan,inf,-inf,1,ff,x,,"]
INSERTS = [b"\t", b",", b"|", b'"', b'""', b"\\", b"{", b"}", b"[", b"]", b":", b"\n", b"\r", b"\x00", b"-", b".",
           b"e", b"E+99", b"1e400", b"nan", b"inf", b"0x", b" ", b"\xff", b"\xc3", b"null", b"true", b"9" * 30]


@st.composite
def mutated(draw: st.DrawFn, fmt: str) -> bytes:
    """A valid record of ``fmt`` after one to four random edits (flip, insert, delete, duplicate,
    truncate, splice with another record)."""
    raw = bytearray(draw(st.sampled_from(VALID[fmt])))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup", "cut", "splice"]))
        i = draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] = draw(st.integers(0, 255))
        elif op == "insert":
            raw[i:i] = draw(st.sampled_from(INSERTS))
        elif op == "delete":
            del raw[i : i + draw(st.integers(1, 12))]
        elif op == "dup":
            raw[i:i] = raw[i : i + draw(st.integers(1, 40))]
        elif op == "cut":
            del raw[i:]
        else:
            other = draw(st.sampled_from(VALID[fmt]))
            raw = raw[:i] + other[draw(st.integers(0, len(other))) :]
    return bytes(raw)


def records(fmt: str) -> st.SearchStrategy[list[bytes]]:
    one = st.one_of(mutated(fmt), st.binary(max_size=200), st.sampled_from(VALID[fmt]), st.sampled_from(HOSTILE))
    return st.lists(one, min_size=1, max_size=24)


def check_contract(batch: Batch, rejected: list[Rejected], rows: list[bytes]) -> None:
    """Every record parsed or rejected exactly once, with a reason and its bytes; values in range."""
    assert len(batch) + len(rejected) == len(rows)
    assert len({r.index for r in rejected}) == len(rejected)
    for r in rejected:
        assert r.raw == rows[r.index] and r.detail, r
        assert r.reason not in (RejectReason.OK, RejectReason.PARSER_ERROR), r  # a parser bug, caught
    labels = np.asarray(batch.labels)
    assert ((labels >= 0) & (labels <= 1)).all(), labels
    assert np.isfinite(np.asarray(batch.dense)).all(), batch.dense
    if batch.event_time is not None:
        t = np.asarray(batch.event_time)
        assert not np.isinf(t).any(), t  # absent is NaN; 1e400 must not become inf


def _hex_or_none(text: str) -> int | None:
    return int(text, 16) if text and all(c in "0123456789abcdefABCDEF" for c in text) and len(text) <= 16 else None


def criteo_reference(raw: bytes) -> tuple[float, list[float], list[int | None]] | None:
    """A plain reading of a well-formed Criteo line, or None when it plainly is not one."""
    try:
        fields = raw.decode("ascii").removesuffix("\n").removesuffix("\r").split("\t")
        label = float(fields[0])
        dense = [float(x) if x else 0.0 for x in fields[1:14]]
    except (UnicodeDecodeError, ValueError, IndexError):
        return None
    cats = [_hex_or_none(x) for x in fields[14:]]
    if len(fields) != 40 or any(c is None and x for c, x in zip(cats, fields[14:], strict=True)):
        return None
    return label, dense, cats


@pytest.fixture
def rss_bound() -> Iterator[None]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < RSS_GROWTH_MB, f"peak RSS grew by {grown_mb:.0f} MB"


@pytest.mark.usefixtures("rss_bound")
@pytest.mark.parametrize("fmt", list(PARSERS))
def test_any_bytes_are_parsed_or_rejected_with_a_reason(fmt: str) -> None:
    parser = PARSERS[fmt]()
    seen = {"parsed": 0, "rejected": 0}

    @FUZZ
    @given(records(fmt))
    def run(rows: list[bytes]) -> None:
        batch, rejected = parser.parse(rows)
        check_contract(batch, rejected, rows)
        seen["parsed"] += len(batch)
        seen["rejected"] += len(rejected)

    run()
    assert seen["parsed"] > 100 and seen["rejected"] > 100, seen  # both sides of the contract were exercised


@pytest.mark.usefixtures("rss_bound")
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_kernel_agrees_with_reference_on_mutated_records(fmt: str) -> None:
    parser = PARSERS[fmt]()

    @FUZZ
    @given(records(fmt))
    def run(rows: list[bytes]) -> None:
        fast, fast_rej = parser.parse(rows)
        ref, ref_rej = parser.parse_reference(rows)
        check_contract(ref, ref_rej, rows)
        assert [(r.index, r.reason, r.detail) for r in fast_rej] == [(r.index, r.reason, r.detail) for r in ref_rej]
        assert canonical(fast) == canonical(ref)

    run()


@pytest.mark.usefixtures("rss_bound")
def test_criteo_kernel_agrees_with_a_plain_reading() -> None:
    """Accepted lines read as Python reads them; lines Python reads as well-formed are accepted."""
    parser = PARSERS["criteo"]()

    @FUZZ
    @given(records("criteo"))
    def run(rows: list[bytes]) -> None:
        batch, rejected = parser.parse(rows)
        refused = {r.index for r in rejected}
        kept = [i for i in range(len(rows)) if i not in refused]
        for k, i in enumerate(kept):
            ref = criteo_reference(rows[i])
            assert ref is not None, rows[i]  # the kernel accepted what is not a Criteo line
            label, dense, cats = ref
            assert float(batch.labels[k]) == label, rows[i]
            assert batch.dense[k].tolist() == np.array(dense, np.float32).tolist(), rows[i]
            for j, c in enumerate(cats):
                ids = batch.slot_ids(f"C{j + 1}", k).tolist()
                assert ids == ([] if c is None else [(j << 56) | (c & ((1 << 56) - 1))]) or len(ids) == 1, rows[i]
        for i in refused:  # a line the plain reading finds well-formed and in range is never refused
            ref = criteo_reference(rows[i])
            if ref is not None and 0 <= ref[0] <= 1 and len(rows[i]) <= MAX_BYTES and all(
                    math.isfinite(d) and abs(d) < 3e38 for d in ref[1]) and all(
                    c is None or c < 1 << 32 for c in ref[2]):
                raise AssertionError(f"refused a well-formed line: {rows[i]!r} ({rejected})")

    run()
