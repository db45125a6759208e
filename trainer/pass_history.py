"""The run's learning curve: one point per committed pass, kept after the pass directories are pruned.

At each commit the chief computes the pass's point (:func:`make_point`): pass id, time, records
(the pass's and the job's total), records/s, per-pass and cumulative AUC and log loss, consumer
lag, freshness, table rows (both tiers) and bytes, the chief's resident memory, and for tables
with a disk tier its rows, file bytes and the pass's RAM hit rate. The point goes into the
pass manifest (``progress``) and into ``pass-history.arrays`` under the checkpoint root, a
column file of the newest :data:`KEEP` points rewritten atomically (temp + fsync + rename, one
PUT on an object store) by the chief after the manifest; a CRC-32C of the payload guards it.

Cumulative metrics (over every record since the job started) come from the bucketed AUC
histograms, which merge exactly: each pass directory holds ``metrics-total.arrays``, the
previous pass's cumulative histograms plus this pass's, listed in the manifest. A restart or a
rollback restores them with the pass, so cumulative AUC goes on from exactly that pass.

Restarts and rollbacks: the series is the lineage of the current model. Writing the point of
pass ``n`` drops every point with an id ``>= n`` (passes discarded by a restart or undone by a
rollback; the records they trained on are trained again and their new points replace them), and
adds the points of complete passes the file misses (a chief that died between the manifest and
the history write). Until the first commit after a rollback the file still holds the undone
points. A damaged file is set aside (``pass-history.arrays.corrupt``) and the series starts over
from the manifests still present: training never stops for its history. Nor does a write that
fails (a read-only file or file system, a full disk, an I/O error): it is counted (the job's
disk state, trainer.disk_space), logged once, and the next commit writes the whole series again,
the missed point included (it is in that pass's manifest).
"""

from __future__ import annotations

import contextlib
import logging
import math
import struct
from typing import Any

import crc32c
import numpy as np

from core.atomic_files import decode_arrays, encode_arrays
from core.errors import CorruptData, StreamrecError
from stores.store import open_store
from trainer import checkpoints
from trainer.checkpoints import Root
from trainer.disk_space import DiskState
from trainer.metrics import Metrics
from trainer.process_stats import rss_mb

log = logging.getLogger(__name__)

HISTORY_FILE = "pass-history.arrays"
TOTAL_METRICS = "metrics-total.arrays"  # in each pass directory: cumulative metric histograms
KEEP = 10_000
_MAGIC = b"SRHIST01"
# a disk tier's part of a point (None each without one): rows and file bytes on disk, cumulative lookups, hit rate
TIER_COLUMNS = ("disk_rows", "disk_bytes", "ram_lookups", "disk_lookups", "ram_hit_rate")
# float64 columns; None is stored as NaN. "pass" is exact in float64 far beyond any run.
COLUMNS = ("pass", "time", "records", "records_total", "records_per_s", "auc", "logloss", "auc_total",
           "logloss_total", "lag", "freshness_s", "rows", "table_bytes", "rss_mb", *TIER_COLUMNS)


def cumulative_metrics(where: Root, previous: dict[str, Any], this_pass: Metrics) -> Metrics:
    """Metrics over every record up to this pass: ``previous`` pass's cumulative file plus ``this_pass``.
    A previous pass without the file (written before it existed) starts the total at this pass."""
    root = open_store(where)
    total = Metrics(this_pass.auc.n_buckets).merge(this_pass)
    entry = (previous.get("files") or {}).get(TOTAL_METRICS)
    if entry is not None:
        d = checkpoints.pass_name(int(previous["pass"]))
        before = Metrics.from_arrays(decode_arrays(root.read_verified(d, entry), root.url(f"{d}/{TOTAL_METRICS}")))
        total.merge(before)
    return total


def write_total(where: Root, pass_id: int, total: Metrics) -> dict[str, Any]:
    """Write pass ``pass_id``'s cumulative metrics; the entry for its manifest."""
    root = open_store(where)
    entry = root.write_bytes(f"{checkpoints.pass_name(pass_id)}/{TOTAL_METRICS}", encode_arrays(total.to_arrays()))
    return {**entry, "file": TOTAL_METRICS}


def make_point(pass_id: int, *, created_at: float, pass_metrics: dict[str, Any], total: dict[str, Any],
               records_total: int, previous: dict[str, Any], lag: float | None, newest_record_time: float | None,
               shard_stats: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The series point of a pass (``previous``: the manifest of the pass before it, or {})."""
    records = int(pass_metrics.get("records") or 0)
    before = previous.get("created_at")
    rate = records / (created_at - before) if isinstance(before, int | float) and created_at > before else None
    tables = [t for s in shard_stats or [] for t in (s.get("tables") or {}).values()]
    return {"pass": pass_id, "time": created_at, "records": records, "records_total": records_total,
            "records_per_s": rate, "auc": pass_metrics.get("auc"), "logloss": pass_metrics.get("logloss"),
            "auc_total": total.get("auc"), "logloss_total": total.get("logloss"), "lag": lag,
            "freshness_s": None if newest_record_time is None else max(0.0, created_at - newest_record_time),
            "rows": sum(int(t.get("rows", 0)) + int(t.get("disk_rows", 0)) for t in tables) if tables else None,
            "table_bytes": sum(int(t.get("bytes", 0)) for t in tables) if tables else None, "rss_mb": rss_mb(),
            **_tier_point(tables, previous.get("progress") or {})}


def _tier_point(tables: list[dict[str, Any]], before: dict[str, Any]) -> dict[str, Any]:
    """The disk tier's part of a point (None each when no table has one): rows and file bytes on disk, the
    shards' lookup counters (cumulative), and the pass's RAM hit rate from the counters' growth since
    the pass before. Counters that went back (a shard restarted) give no rate for that pass."""
    tiered = [t for t in tables if "disk_rows" in t]
    if not tiered:
        return dict.fromkeys(TIER_COLUMNS)
    ram, disk = (sum(int(t.get(k, 0)) for t in tiered) for k in ("ram_hits", "disk_hits"))
    d_ram, d_disk = ram - int(before.get("ram_lookups") or 0), disk - int(before.get("disk_lookups") or 0)
    rate = d_ram / (d_ram + d_disk) if d_ram >= 0 and d_disk >= 0 and d_ram + d_disk > 0 else None
    return {"disk_rows": sum(int(t["disk_rows"]) for t in tiered),
            "disk_bytes": sum(int(t.get("disk_bytes", 0)) for t in tiered),
            "ram_lookups": ram, "disk_lookups": disk, "ram_hit_rate": rate}


def encode(points: list[dict[str, Any]]) -> bytes:
    cols = {c: np.array([_num(p.get(c)) for p in points], np.float64) for c in COLUMNS}
    payload = b"".join(bytes(c) if isinstance(c, np.ndarray) else c for c in encode_arrays(cols))
    return _MAGIC + struct.pack("<I", crc32c.crc32c(payload)) + payload


def decode(data: bytes, where: str) -> list[dict[str, Any]]:
    if data[:8] != _MAGIC or len(data) < 12:
        raise CorruptData(f"{where}: not a pass history file", detail={"file": where})
    (crc,) = struct.unpack("<I", data[8:12])
    payload = memoryview(data)[12:]
    if crc32c.crc32c(payload) != crc:
        raise CorruptData(f"{where}: checksum mismatch", detail={"file": where})
    cols = decode_arrays(payload, where)
    n = len(cols["pass"])
    names = [c for c in COLUMNS if c in cols and len(cols[c]) == n]
    ints = {"pass", "records", "records_total", "rows", "table_bytes", "lag", "disk_rows", "disk_bytes", "ram_lookups",
            "disk_lookups"}
    lists = [[None if v != v else (int(v) if c in ints else v) for v in cols[c].tolist()] for c in names]  # NaN: None
    return [dict(zip(names, row, strict=True)) for row in zip(*lists, strict=True)]


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def read(where: Root) -> list[dict[str, Any]]:
    """The stored points, oldest first ([] when there is no file yet); CorruptData when damaged."""
    root = open_store(where)
    try:
        data = root.read_bytes(HISTORY_FILE)
    except FileNotFoundError:
        return []
    return decode(data, root.url(HISTORY_FILE))


def since(points: list[dict[str, Any]], pass_id: int) -> list[dict[str, Any]]:
    """Points of passes after ``pass_id``."""
    return [p for p in points if p["pass"] > pass_id]


def record(where: Root, point: dict[str, Any], *, keep: int = KEEP,
           disk: DiskState | None = None) -> list[dict[str, Any]]:
    """Add the point of a just-committed pass (the module docstring: points with an id >= it go,
    complete passes the file misses come back from their manifests); returns the new series.
    A failed write is counted in ``disk`` (logged once) and left to the next commit."""
    root = open_store(where)
    try:
        points = read(root)
    except (CorruptData, OSError) as exc:
        log.warning("pass history unreadable, starting it over from the manifests: %s", exc)
        with contextlib.suppress(OSError):
            root.write_bytes(f"{HISTORY_FILE}.corrupt", [root.read_bytes(HISTORY_FILE)])
        points = []
    n = int(point["pass"])
    points = [p for p in points if p["pass"] < n]
    have = {p["pass"] for p in points}
    for m in checkpoints.complete_passes(root):
        if m < n and m not in have and (not points or m > points[0]["pass"]):
            with contextlib.suppress(CorruptData, OSError, AttributeError):
                found = root.read_json(f"{checkpoints.pass_name(m)}/{checkpoints.MANIFEST}").get("progress")
                if found:
                    points.append(found)
    points = sorted(points, key=lambda p: p["pass"])[-(keep - 1):] if keep > 1 else []
    points.append(point)
    try:
        root.write_bytes(HISTORY_FILE, [encode(points)])
    except (OSError, StreamrecError) as exc:  # e.g. an object store that does not answer
        (disk if disk is not None else DiskState()).failed("pass_history", exc)
        return points
    if disk is not None:
        disk.ok("pass_history")
    return points
