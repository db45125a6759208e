"""Generated samples as bytes: Criteo TSV lines or JSON lines, and whole dataset files.

Both are written by numba kernels into one buffer (a million rows in about a second). JSON
records name the user and item slots ``user_id`` and ``item_id`` (hex text, the same slot
ids as Criteo's C1/C2, so both formats give identical feature ids).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np

from core.kernel_cache import kernel
from logrecords.criteo import join_messages
from logrecords.generator import ITEM_SLOT, N_DENSE, N_SPARSE, USER_SLOT, PlantedModel, Sample, roc_auc
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_ROW_MAX = 2 + N_DENSE * 21 + N_SPARSE * 9 + 1
_JSON_ROW_MAX = 40 + N_DENSE * (8 + 21) + N_SPARSE * (12 + 10) + 2


@kernel(inline="always")
def _put_int(buf: np.ndarray, pos: int, v: int, digits: np.ndarray) -> int:
    if v < 0:
        buf[pos] = 45
        pos += 1
        v = -v
    k = 0
    while True:
        digits[k] = 48 + v % 10
        v //= 10
        k += 1
        if v == 0:
            break
    for m in range(k):
        buf[pos + m] = digits[k - 1 - m]
    return pos + k


@kernel(inline="always")
def _put_hex8(buf: np.ndarray, pos: int, value: np.uint32, hexdigits: np.ndarray) -> int:
    v = np.uint64(value)
    for m in range(8):
        buf[pos + 7 - m] = hexdigits[v & np.uint64(15)]
        v >>= np.uint64(4)
    return pos + 8


@kernel(inline="always")
def _put(buf: np.ndarray, pos: int, src: np.ndarray, a: int, b: int) -> int:
    for k in range(b - a):
        buf[pos + k] = src[a + k]
    return pos + b - a


@kernel()
def _encode_rows(
    as_json: bool, labels: np.ndarray, event_ms: np.ndarray, dense: np.ndarray, dense_missing: np.ndarray,
    sparse: np.ndarray, sparse_missing: np.ndarray, keys: np.ndarray, key_bounds: np.ndarray, hexdigits: np.ndarray,
    row_max: int,
) -> tuple[np.ndarray, np.ndarray]:
    # JSON keys: '{"label":', ',"ts":', then ',"<dense>":' per dense field and ',"<slot>":"' per slot.
    # Criteo rows are the same walk with tabs for keys and nothing written for a missing value.
    n, n_dense = dense.shape
    n_sparse = sparse.shape[1]
    buf = np.empty(n * row_max, dtype=np.uint8)
    ends = np.empty(n, dtype=np.int64)
    digits = np.empty(20, dtype=np.uint8)
    pos = 0
    for i in range(n):
        if as_json:
            pos = _put(buf, pos, keys, key_bounds[0], key_bounds[1])
        buf[pos] = 48 + labels[i]
        pos += 1
        if as_json:
            pos = _put(buf, pos, keys, key_bounds[1], key_bounds[2])
            pos = _put_int(buf, pos, event_ms[i] // 1000, digits)
            ms = event_ms[i] % 1000
            buf[pos] = 46
            buf[pos + 1] = 48 + ms // 100
            buf[pos + 2] = 48 + ms // 10 % 10
            buf[pos + 3] = 48 + ms % 10
            pos += 4
        for j in range(n_dense):
            if as_json and not dense_missing[i, j]:
                pos = _put(buf, pos, keys, key_bounds[2 + j], key_bounds[3 + j])
            elif not as_json:
                buf[pos] = 9
                pos += 1
            if not dense_missing[i, j]:
                pos = _put_int(buf, pos, dense[i, j], digits)
        for j in range(n_sparse):
            if as_json and not sparse_missing[i, j]:
                pos = _put(buf, pos, keys, key_bounds[2 + n_dense + j], key_bounds[3 + n_dense + j])
            elif not as_json:
                buf[pos] = 9
                pos += 1
            if not sparse_missing[i, j]:
                pos = _put_hex8(buf, pos, sparse[i, j], hexdigits)
                if as_json:
                    buf[pos] = 34
                    pos += 1
        if as_json:
            buf[pos] = 125
            pos += 1
        buf[pos] = 10
        pos += 1
        ends[i] = pos
    return buf[:pos], ends


def criteo_text(sample: Sample) -> tuple[bytes, np.ndarray]:
    """All rows as one newline-terminated TSV buffer, and the end offset of every row."""
    no_keys = np.zeros(0, dtype=np.uint8)
    buf, ends = _encode_rows(
        False, sample.labels, np.zeros(0, dtype=np.int64), sample.dense, sample.dense_missing, sample.sparse,
        sample.sparse_missing, no_keys, np.zeros(1, dtype=np.int64), _HEX, _ROW_MAX,
    )
    return buf.tobytes(), ends


def json_text(sample: Sample) -> tuple[bytes, np.ndarray]:
    """All rows as newline-terminated JSON objects (event time to the millisecond), and row end offsets."""
    keys = [b'{"label":', b',"ts":']
    keys += [f',"I{j + 1}":'.encode() for j in range(N_DENSE)]
    keys += [f',"{name}":"'.encode() for name in json_slot_names()]
    key_buf, key_bounds = join_messages(keys)
    event_ms = np.round(sample.event_time * 1000.0).astype(np.int64)
    buf, ends = _encode_rows(
        True, sample.labels, event_ms, sample.dense, sample.dense_missing, sample.sparse, sample.sparse_missing,
        key_buf, key_bounds, _HEX, _JSON_ROW_MAX,
    )
    return buf.tobytes(), ends


def _split_rows(text: bytes, ends: np.ndarray) -> list[bytes]:
    starts = np.r_[0, ends[:-1]].tolist()
    return [text[a : b - 1] for a, b in zip(starts, ends.tolist(), strict=True)]


def criteo_lines(sample: Sample) -> list[bytes]:
    """One Criteo TSV line per record, without the newline (ready to produce as messages)."""
    return _split_rows(*criteo_text(sample))


def json_lines(sample: Sample) -> list[bytes]:
    """One JSON object per record under :func:`generated_json_schema` (ready to produce as messages)."""
    return _split_rows(*json_text(sample))


def json_slot_names() -> list[str]:
    names = [f"C{j + 1}" for j in range(N_SPARSE)]
    names[USER_SLOT], names[ITEM_SLOT] = "user_id", "item_id"
    return names


def generated_json_schema() -> SchemaConfig:
    """The schema of :func:`json_lines`: I1..I13, user_id, item_id, C3..C26 (hex), ts. Every field
    but the user and the item is optional: the generator leaves some out, as context a request may lack."""
    dense = [SlotConfig(name=f"I{j + 1}", kind=SlotKind.DENSE, optional=True) for j in range(N_DENSE)]
    sparse = [
        SlotConfig(name=name, kind=SlotKind.SPARSE, slot_id=j, hash=HashKind.HEX,
                   optional=name not in ("user_id", "item_id"))
        for j, name in enumerate(json_slot_names())
    ]
    return SchemaConfig(
        format="json", slots=(*dense, *sparse), event_time="ts", user_id="user_id", item_id="item_id"
    )


def generated_criteo_schema() -> SchemaConfig:
    """The Criteo schema with C1 as the user slot and C2 as the item slot."""
    return SchemaConfig.criteo(user_id="C1", item_id="C2")


def write_dataset(
    path: str | Path, model: PlantedModel, rows: int, *, fmt: Literal["criteo", "json"] = "criteo",
    chunk_rows: int = 200_000,
) -> dict[str, float | int]:
    """Write ``rows`` generated records to ``path``; returns rows, click rate and the Bayes-optimal AUC."""
    labels = np.empty(rows, dtype=np.int8)
    prob = np.empty(rows, dtype=np.float64)
    done = 0
    with open(path, "wb") as f:
        while done < rows:
            sample = model.sample(min(chunk_rows, rows - done))
            n = len(sample)
            labels[done : done + n] = sample.labels
            prob[done : done + n] = sample.prob
            f.write(criteo_text(sample)[0] if fmt == "criteo" else json_text(sample)[0])
            done += n
    return {"rows": rows, "ctr": float(labels.mean()), "bayes_auc": roc_auc(labels, prob)}
