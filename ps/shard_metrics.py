"""A shard's Prometheus metrics, read from the shard's own counters and tables when scraped.

The request loop pays nothing for them: the shard already counts requests by op, refusals by
error code and, in each table, keys pulled and pushed, rows, bytes and what the byte budget
refused or evicted (``SparseTable.stats()``); :class:`ShardCollector` turns those into
metric families at scrape time, in the metrics thread (:mod:`core.metrics_http`).

Every label value comes from a closed set: ``op`` a protocol op, ``code`` an error class of
:mod:`core.errors`, ``table`` a table of the PS config, ``reason`` one of the fixed names
below or of :class:`ps.shard_requests.Outbox`; ``shard`` is the shard's index.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.role_registry import role_registry

if TYPE_CHECKING:
    from ps.shard_server import ShardServer

# table counter -> reason label of streamrec_shard_refused_keys_total
REFUSED_KEYS = {"refused_by_budget": "budget", "not_admitted": "admission", "nonfinite_rejected": "nonfinite",
                "nonfinite_skipped": "nonfinite_skipped"}
# table counter -> reason label of streamrec_shard_evicted_rows_total
EVICTED_ROWS = {"evicted": "shrink", "evicted_by_budget": "budget", "disk_evicted": "disk_budget"}

HELP = {
    "streamrec_shard_requests": "Requests this shard decoded, by protocol op (rate: requests/s; moves with every "
                                "pull, push and admin call).",
    "streamrec_shard_refused_requests": "Requests this shard answered with an error, by error class of core.errors "
                                        "(bad input, failed signatures, unknown tables).",
    "streamrec_shard_connections_closed": "Peer connections this shard closed, oversized or malformed frames among "
                                          "them (rises when a client misbehaves).",
    "streamrec_shard_dropped_replies": "Replies dropped instead of queued, by reason: the peer was gone or not "
                                       "reading (it times out and retries).",
    "streamrec_shard_dense_elements": "Dense parameters (float32 elements) this shard holds, all dense parts "
                                      "together; moves when a model is created or restored.",
    "streamrec_shard_pulled_keys": "Keys trainers and the service pulled from this table (rate: keys/s).",
    "streamrec_shard_pushed_keys": "Keys whose updates trainers pushed into this table (rate: keys/s).",
    "streamrec_shard_pulled_missing_keys": "Keys pulled that had no row, answered with their initializer (new "
                                           "features; a burst after a restart means rows were lost).",
    "streamrec_shard_table_rows": "Rows (features with an embedding) this table holds on this shard.",
    "streamrec_shard_table_bytes": "Bytes this table holds on this shard: rows, hash index, optimizer state and "
                                   "admission sketches.",
    "streamrec_shard_table_max_bytes": "This table's byte budget on this shard, absent when unbounded; keys are "
                                       "refused or rows evicted once table bytes reach it.",
    "streamrec_shard_table_capacity_rows": "Rows allocated for this table on this shard (grows in steps ahead of "
                                           "the rows held).",
    "streamrec_shard_refused_keys": "Keys given no row or no update, by reason: budget (byte budget full), "
                                    "admission (not admitted yet), nonfinite (a NaN or inf update).",
    "streamrec_shard_evicted_rows": "Rows evicted, by reason: shrink (unseen for too long), budget (made room "
                                    "under the byte budget) or disk_budget (made room in a full disk tier).",
    "streamrec_shard_tier_rows": "Rows of a table with a disk tier, by tier (ram, disk); each row is in one.",
    "streamrec_shard_tier_bytes": "Bytes of a table with a disk tier, by tier: ram (rows, index, optimizer state, "
                                  "sketches and the disk rows' keys and index), disk (the tier's file).",
    "streamrec_shard_tier_disk_max_bytes": "The disk tier's byte budget (tier.disk.max_bytes); at it, its coldest "
                                           "rows are evicted for new ones.",
    "streamrec_shard_tier_lookups": "Distinct keys pulled or pushed, by the tier that held them (ram, disk); "
                                    "hit rate: ram / (ram + disk). Keys in neither are not counted.",
    "streamrec_shard_tier_moved_rows": "Rows moved between tiers, by direction: promoted (disk to RAM, on a "
                                       "pull's second read lately, or a push while a save reads the records), "
                                       "demoted (RAM to disk, at the RAM budget) or created (new rows made on disk: "
                                       "a push brought more new ids than RAM holds rows).",
    "streamrec_shard_tier_disk_reads": "Rows read from the disk tier (pulls, promotions, saves, serving reads).",
    "streamrec_shard_tier_disk_updates": "Disk rows a push updated on disk (written near the tier file's write "
                                         "head), without moving them to RAM.",
    "streamrec_shard_tier_disk_full": "Writes the disk refused (no space to grow the tier's file): a demotion's "
                                      "rows stayed in RAM under its budget's rule (evict or refuse); new rows "
                                      "past RAM's were refused.",
}
"""Each metric's HELP: what it counts, in what unit, and when it moves."""


def _counter(name: str, labels: tuple[str, ...]) -> CounterMetricFamily:
    return CounterMetricFamily(name, HELP[name], labels=labels)


def _gauge(name: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, HELP[name], labels=labels)


class ShardCollector(Collector):
    """Metric families of one :class:`ps.shard_server.ShardServer` (module docstring)."""

    def __init__(self, server: ShardServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server = self.server
        shard = str(server.index)
        # C-level copies, atomic under the GIL while the loop thread counts on
        requests, errors = dict(server.requests), dict(server.errors)
        tables = [(name, table.stats()) for name, table in list(server.sparse.items())]
        dense = list(server.tables.dense_meta.values())

        by_op = _counter("streamrec_shard_requests", ("shard", "op"))
        for op, n in sorted(requests.items()):
            by_op.add_metric((shard, op), n)
        yield by_op
        refused = _counter("streamrec_shard_refused_requests", ("shard", "code"))
        for code, n in sorted(errors.items()):
            refused.add_metric((shard, code), n)
        yield refused
        closed = _counter("streamrec_shard_connections_closed", ("shard",))
        closed.add_metric((shard,), server.connections_closed)
        yield closed
        dropped = _counter("streamrec_shard_dropped_replies", ("shard", "reason"))
        for reason, n in sorted(server.replies_dropped.items()):
            dropped.add_metric((shard, reason), n)
        yield dropped
        yield from _table_families(shard, tables)
        held = _gauge("streamrec_shard_dense_elements", ("shard",))
        held.add_metric((shard,), sum(int(m["size"]) for m in dense))
        yield held


def _table_families(shard: str, tables: list[tuple[str, dict[str, Any]]]) -> Iterator[Metric]:
    labels = ("shard", "table")
    pulled = _counter("streamrec_shard_pulled_keys", labels)
    pushed = _counter("streamrec_shard_pushed_keys", labels)
    missing = _counter("streamrec_shard_pulled_missing_keys", labels)
    rows = _gauge("streamrec_shard_table_rows", labels)
    nbytes = _gauge("streamrec_shard_table_bytes", labels)
    max_bytes = _gauge("streamrec_shard_table_max_bytes", labels)
    capacity = _gauge("streamrec_shard_table_capacity_rows", labels)
    refused = _counter("streamrec_shard_refused_keys", (*labels, "reason"))
    evicted = _counter("streamrec_shard_evicted_rows", (*labels, "reason"))
    for name, st in tables:
        key = (shard, name)
        pulled.add_metric(key, st["pulled_keys"])
        pushed.add_metric(key, st["pushed_keys"])
        missing.add_metric(key, st["rejected_pulls"])
        rows.add_metric(key, st["rows"])
        nbytes.add_metric(key, st["bytes"])
        capacity.add_metric(key, st["capacity_rows"])
        if st.get("max_bytes") is not None:
            max_bytes.add_metric(key, st["max_bytes"])
        for counter, reason in REFUSED_KEYS.items():
            refused.add_metric((*key, reason), st.get(counter, 0))
        for counter, reason in EVICTED_ROWS.items():
            evicted.add_metric((*key, reason), st.get(counter, 0))
    yield from (pulled, pushed, missing, rows, nbytes, max_bytes, capacity, refused, evicted)
    yield from _tier_families(shard, [(name, st) for name, st in tables if "disk_rows" in st])


def _tier_families(shard: str, tables: list[tuple[str, dict[str, Any]]]) -> Iterator[Metric]:
    """The disk tier's families, for the tables that have one."""
    labels = ("shard", "table")
    rows = _gauge("streamrec_shard_tier_rows", (*labels, "tier"))
    nbytes = _gauge("streamrec_shard_tier_bytes", (*labels, "tier"))
    max_bytes = _gauge("streamrec_shard_tier_disk_max_bytes", labels)
    lookups = _counter("streamrec_shard_tier_lookups", (*labels, "tier"))
    moved = _counter("streamrec_shard_tier_moved_rows", (*labels, "direction"))
    reads = _counter("streamrec_shard_tier_disk_reads", labels)
    updates = _counter("streamrec_shard_tier_disk_updates", labels)
    full = _counter("streamrec_shard_tier_disk_full", labels)
    for name, st in tables:
        key = (shard, name)
        rows.add_metric((*key, "ram"), st["rows"])
        rows.add_metric((*key, "disk"), st["disk_rows"])
        nbytes.add_metric((*key, "ram"), st["bytes"] + st["disk_index_bytes"])
        nbytes.add_metric((*key, "disk"), st["disk_bytes"])
        max_bytes.add_metric(key, st["disk_max_bytes"])
        lookups.add_metric((*key, "ram"), st["ram_hits"])
        lookups.add_metric((*key, "disk"), st["disk_hits"])
        moved.add_metric((*key, "promoted"), st["promoted"])
        moved.add_metric((*key, "demoted"), st["demoted"])
        moved.add_metric((*key, "created"), st["created_on_disk"])
        reads.add_metric(key, st["disk_reads"])
        updates.add_metric(key, st["updated_on_disk"])
        full.add_metric(key, st["disk_full"])
    yield from (rows, nbytes, max_bytes, lookups, moved, reads, updates, full)


def shard_registry(server: ShardServer) -> CollectorRegistry:
    """A registry of its own (no process-global state) holding ``server``'s metrics and its process's."""
    registry = role_registry("shard")
    registry.register(ShardCollector(server))
    return registry
