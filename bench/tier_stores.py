"""Disk-tier store choice: streamrec's disk tier (fixed-size records of a file copied with
pread/pwrite by numba kernels, indexed by its slots in RAM, :mod:`tables.disk_tier`) beside
RocksDB (``rocksdict``: write batches, multi-get) and LMDB (``lmdb``: ``putmulti``,
``getmulti``), same run, same rows.

Rows are dim-16 Adam rows (16 weights + 34 optimizer floats = 200 bytes) of ``--rows`` random
uint64 keys, written in ``--batch``-key batches, then read and rewritten in batches of random
keys (the page cache warm: the working set fits it). The two libraries are optional: install
them (``pip install rocksdict lmdb``) to measure them. Run: ``python -m bench.tier_stores [--json]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tables.disk_tier import DiskTier
from tables.hashmap import new_hash_key
from tables.rows import COLUMN_DTYPES

WIDTHS = {"params": 16, "state": 34, "wide_state": 0}
ROW_BYTES = 4 * sum(WIDTHS.values())


def per_s(keys: int, fn: Callable[[np.ndarray], Any], batches: list[np.ndarray]) -> float:
    t = time.perf_counter()
    for b in batches:
        fn(b)
    return keys * len(batches) / (time.perf_counter() - t)


def ours(keys: np.ndarray, rows: np.ndarray, batches: list[np.ndarray], batch: int, d: Path) -> dict[str, float]:
    tier = DiskTier(d, "bench", WIDTHS, keys.shape[0] * ROW_BYTES * 2, new_hash_key())
    n = keys.shape[0]

    def cols(at: np.ndarray) -> dict[str, np.ndarray]:
        out = {name: np.zeros(at.shape[0], dt) for name, dt in COLUMN_DTYPES.items()}
        out.update(keys=keys[at], params=rows[at, :16], state=rows[at, 16:], wide_state=np.zeros((at.shape[0], 0),
                                                                                                 np.float32))
        return out

    t = time.perf_counter()
    for s in range(0, n, batch):
        tier.put(cols(np.arange(s, min(n, s + batch))))
    fill = n / (time.perf_counter() - t)

    def read(at: np.ndarray) -> None:
        got = tier.read(tier.lookup(keys[at]))
        assert np.array_equal(got["params"], rows[at, :16])

    def rewrite(at: np.ndarray) -> None:
        tier.free(tier.lookup(keys[at]), keys[at])  # a promotion frees, a demotion writes again
        tier.put(cols(at))

    out = {"fill": fill, "read": per_s(batch, read, batches), "write": per_s(batch, rewrite, batches)}
    tier.close()
    return out


def rocks(keys: np.ndarray, rows: np.ndarray, batches: list[np.ndarray], batch: int, d: Path) -> dict[str, float]:
    import rocksdict

    db = rocksdict.Rdict(str(d / "rocks"), options=rocksdict.Options(raw_mode=True))
    kb = [k.tobytes() for k in keys]

    def write(at: np.ndarray) -> None:
        wb = rocksdict.WriteBatch(raw_mode=True)
        for i in at.tolist():
            wb.put(kb[i], rows[i].tobytes())
        db.write(wb)

    def read(at: np.ndarray) -> None:
        got = np.frombuffer(b"".join(db[[kb[i] for i in at.tolist()]]), np.float32).reshape(-1, rows.shape[1])
        assert np.array_equal(got, rows[at])

    fill = per_s(batch, write, [np.arange(s, min(len(kb), s + batch)) for s in range(0, len(kb), batch)])
    out = {"fill": fill * 1.0, "read": per_s(batch, read, batches), "write": per_s(batch, write, batches)}
    db.close()
    return out


def lmdb_store(keys: np.ndarray, rows: np.ndarray, batches: list[np.ndarray], batch: int,
               d: Path) -> dict[str, float]:
    import lmdb

    env = lmdb.open(str(d / "lmdb"), map_size=keys.shape[0] * ROW_BYTES * 4 + (1 << 28), writemap=True, sync=False,
                    metasync=False)
    kb = [k.tobytes() for k in keys]

    def write(at: np.ndarray) -> None:
        with env.begin(write=True) as txn:
            txn.cursor().putmulti([(kb[i], rows[i].tobytes()) for i in at.tolist()])

    def read(at: np.ndarray) -> None:
        with env.begin() as txn:
            got = dict(txn.cursor().getmulti([kb[i] for i in at.tolist()]))
        assert len(got) == np.unique(at).shape[0]

    fill = per_s(batch, write, [np.arange(s, min(len(kb), s + batch)) for s in range(0, len(kb), batch)])
    out = {"fill": fill, "read": per_s(batch, read, batches), "write": per_s(batch, write, batches)}
    env.close()
    return out


def run(n_rows: int, batch: int, n_batches: int, workdir: Path) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    keys = np.arange(1, n_rows + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # distinct: an odd multiplier
    rows = rng.standard_normal((n_rows, sum(WIDTHS.values()))).astype(np.float32)
    batches = [np.unique(rng.integers(0, n_rows, batch)) for _ in range(n_batches)]
    batches = [b[: min(x.shape[0] for x in batches)] for b in batches]
    batch_keys = batches[0].shape[0]
    result: dict[str, Any] = {"rows": n_rows, "batch_keys": batch_keys, "row_bytes": ROW_BYTES, "keys_per_s": {}}
    for name, fn in (("streamrec", ours), ("rocksdict", rocks), ("lmdb", lmdb_store)):
        d = workdir / name
        d.mkdir()
        try:
            result["keys_per_s"][name] = fn(keys, rows, batches, batch_keys, d)
        except ImportError as e:
            result["keys_per_s"][name] = {"skipped": str(e)}
        shutil.rmtree(d, ignore_errors=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=65536, help="keys per batch (random keys; repeats dropped)")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--dir", type=Path, default=None, help="where the stores live (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        result = run(args.rows, args.batch, args.batches, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return 0
    ours_ = result["keys_per_s"]["streamrec"]
    print(f"{result['rows']} rows of {ROW_BYTES} B, batches of {result['batch_keys']} random keys (keys/s)")
    for name, r in result["keys_per_s"].items():
        if "skipped" in r:
            print(f"  {name:10s} skipped: {r['skipped']}")
            continue
        ratio = "" if name == "streamrec" else (f"   streamrec/{name}: read {ours_['read'] / r['read']:.1f}x, "
                                                f"write {ours_['write'] / r['write']:.1f}x")
        print(f"  {name:10s} fill {r['fill']:>12,.0f}  read {r['read']:>12,.0f}  write {r['write']:>12,.0f}{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
