"""Generated samples as bytes: Criteo TSV lines or JSON lines, and whole dataset files.

Criteo lines are written by a numba kernel into one buffer (1M rows in about a second); JSON
lines go through ``json.dumps`` per record and are meant for streams and small files. JSON
records name the user and item slots ``user_id`` and ``item_id`` (hex text, the same slot
ids as Criteo's C1/C2, so both formats give identical feature ids).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
from numba import njit

from streaming.config import HashKind, SchemaConfig, SlotConfig, SlotKind
from streaming.generator import ITEM_SLOT, N_DENSE, N_SPARSE, USER_SLOT, PlantedModel, Sample, roc_auc

_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_ROW_MAX = 2 + N_DENSE * 21 + N_SPARSE * 9 + 1


@njit(cache=True)
def _criteo_text(
    labels: np.ndarray, dense: np.ndarray, dense_missing: np.ndarray, sparse: np.ndarray, sparse_missing: np.ndarray,
    hexdigits: np.ndarray, row_max: int,
) -> tuple[np.ndarray, np.ndarray]:
    n, n_dense = dense.shape
    n_sparse = sparse.shape[1]
    buf = np.empty(n * row_max, dtype=np.uint8)
    ends = np.empty(n, dtype=np.int64)
    digits = np.empty(20, dtype=np.uint8)
    pos = 0
    for i in range(n):
        buf[pos] = 48 + labels[i]
        pos += 1
        for j in range(n_dense):
            buf[pos] = 9
            pos += 1
            if dense_missing[i, j]:
                continue
            v = dense[i, j]
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
            pos += k
        for j in range(n_sparse):
            buf[pos] = 9
            pos += 1
            if sparse_missing[i, j]:
                continue
            v = np.uint64(sparse[i, j])
            for m in range(8):
                buf[pos + 7 - m] = hexdigits[v & np.uint64(15)]
                v >>= np.uint64(4)
            pos += 8
        buf[pos] = 10
        pos += 1
        ends[i] = pos
    return buf[:pos], ends


def criteo_text(sample: Sample) -> tuple[bytes, np.ndarray]:
    """All rows as one newline-terminated TSV buffer, and the end offset of every row."""
    buf, ends = _criteo_text(
        sample.labels, sample.dense, sample.dense_missing, sample.sparse, sample.sparse_missing, _HEX, _ROW_MAX
    )
    return buf.tobytes(), ends


def criteo_lines(sample: Sample) -> list[bytes]:
    """One Criteo TSV line per record, without the newline (ready to produce as messages)."""
    text, ends = criteo_text(sample)
    starts = np.r_[0, ends[:-1]].tolist()
    return [text[a : b - 1] for a, b in zip(starts, ends.tolist(), strict=True)]


def json_lines(sample: Sample) -> list[bytes]:
    """One JSON object per record under :func:`generated_json_schema`."""
    names = json_slot_names()
    dense = sample.dense.tolist()
    dmiss = sample.dense_missing.tolist()
    smiss = sample.sparse_missing.tolist()
    hexes = np.char.mod("%08x", sample.sparse).tolist()
    out = []
    for i in range(len(sample)):
        rec: dict[str, object] = {"label": int(sample.labels[i]), "ts": float(sample.event_time[i])}
        for j in range(N_DENSE):
            if not dmiss[i][j]:
                rec[f"I{j + 1}"] = dense[i][j]
        for j in range(N_SPARSE):
            if not smiss[i][j]:
                rec[names[j]] = hexes[i][j]
        out.append(json.dumps(rec, separators=(",", ":")).encode())
    return out


def json_slot_names() -> list[str]:
    names = [f"C{j + 1}" for j in range(N_SPARSE)]
    names[USER_SLOT], names[ITEM_SLOT] = "user_id", "item_id"
    return names


def generated_json_schema() -> SchemaConfig:
    """The schema of :func:`json_lines`: I1..I13, user_id, item_id, C3..C26 (hex), ts."""
    dense = [SlotConfig(name=f"I{j + 1}", kind=SlotKind.DENSE) for j in range(N_DENSE)]
    sparse = [
        SlotConfig(name=name, kind=SlotKind.SPARSE, slot_id=j, hash=HashKind.HEX)
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
            if fmt == "criteo":
                f.write(criteo_text(sample)[0])
            else:
                f.write(b"\n".join(json_lines(sample)) + b"\n")
            done += n
    return {"rows": rows, "ctr": float(labels.mean()), "bayes_auc": roc_auc(labels, prob)}
