"""Reading the rows of a saved id-rows table without loading it into a table: the keys and
uint64 rows a save's rows file holds (:mod:`tables.table_files` format: chunks of
``chunk_rows`` rows, each chunk every column's bytes in the row store's column order)."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.errors import CorruptData
from tables.rows import COLUMN_DTYPES


def decode_saved_rows(buf: memoryview, manifest: dict[str, Any], source: str) -> tuple[np.ndarray, np.ndarray]:
    """(keys uint64 (n,), rows uint64 (n, words)) of a verified rows file and its table manifest."""
    try:
        n, chunk = int(manifest["rows"]), int(manifest["chunk_rows"])
        # elements a row holds in each column: 1-d columns one, 2-d columns their width (maybe 0);
        # the file holds them in the row store's column order (the manifest's JSON is sorted)
        saved = manifest["layout"]["columns"]
        columns = {name: (np.dtype(saved[name][0]), int(saved[name][1]) if len(saved[name]) > 1 else 1)
                   for name in COLUMN_DTYPES}
        dtype, width = columns["params"]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptData(f"{source}: not an id-rows save manifest ({exc!r})") from None
    if dtype != np.float32 or width % 2 or chunk <= 0:
        raise CorruptData(f"{source}: params column {dtype} x {width} is not id rows")
    row_bytes = sum(dt.itemsize * w for dt, w in columns.values())
    if len(buf) != n * row_bytes:
        raise CorruptData(f"{source}: holds {len(buf)} bytes, expected {n} rows x {row_bytes} bytes")
    raw = np.frombuffer(buf, np.uint8)
    keys = np.empty(n, np.uint64)
    rows = np.empty((n, width // 2), np.uint64)
    off = 0
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        for name, (dt, w) in columns.items():
            nb = (b - a) * dt.itemsize * w
            if name == "keys":
                keys[a:b] = raw[off : off + nb].view(np.uint64)
            elif name == "params":
                rows[a:b] = raw[off : off + nb].view(np.uint64).reshape(b - a, width // 2)
            off += nb
    return keys, rows
