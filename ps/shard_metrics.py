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

if TYPE_CHECKING:
    from ps.shard_server import ShardServer

# table counter -> reason label of streamrec_shard_refused_keys_total
REFUSED_KEYS = {"refused_by_budget": "budget", "not_admitted": "admission", "nonfinite_rejected": "nonfinite",
                "nonfinite_skipped": "nonfinite_skipped"}
# table counter -> reason label of streamrec_shard_evicted_rows_total
EVICTED_ROWS = {"evicted": "shrink", "evicted_by_budget": "budget"}


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

        by_op = CounterMetricFamily("streamrec_shard_requests", "requests decoded, by op", labels=("shard", "op"))
        for op, n in sorted(requests.items()):
            by_op.add_metric((shard, op), n)
        yield by_op
        refused = CounterMetricFamily("streamrec_shard_refused_requests", "requests refused, by error code",
                                      labels=("shard", "code"))
        for code, n in sorted(errors.items()):
            refused.add_metric((shard, code), n)
        yield refused
        closed = CounterMetricFamily("streamrec_shard_connections_closed",
                                     "peer connections closed (oversized frames among them)", labels=("shard",))
        closed.add_metric((shard,), server.connections_closed)
        yield closed
        dropped = CounterMetricFamily("streamrec_shard_dropped_replies",
                                      "replies not queued: the peer was gone or not reading, by reason",
                                      labels=("shard", "reason"))
        for reason, n in sorted(server.replies_dropped.items()):
            dropped.add_metric((shard, reason), n)
        yield dropped
        yield from _table_families(shard, tables)
        held = GaugeMetricFamily("streamrec_shard_dense_elements", "dense parameters held (all dense parts)",
                                 labels=("shard",))
        held.add_metric((shard,), sum(int(m["size"]) for m in dense))
        yield held


def _table_families(shard: str, tables: list[tuple[str, dict[str, Any]]]) -> Iterator[Metric]:
    labels = ("shard", "table")
    pulled = CounterMetricFamily("streamrec_shard_pulled_keys", "keys pulled (rate: keys/s)", labels=labels)
    pushed = CounterMetricFamily("streamrec_shard_pushed_keys", "keys pushed (rate: keys/s)", labels=labels)
    missing = CounterMetricFamily("streamrec_shard_pulled_missing_keys",
                                  "keys pulled that had no row (read as their initializer)", labels=labels)
    rows = GaugeMetricFamily("streamrec_shard_table_rows", "rows held", labels=labels)
    nbytes = GaugeMetricFamily("streamrec_shard_table_bytes", "bytes held (rows, index, optimizer state, sketches)",
                               labels=labels)
    max_bytes = GaugeMetricFamily("streamrec_shard_table_max_bytes", "the table's byte budget (absent: none)",
                                  labels=labels)
    capacity = GaugeMetricFamily("streamrec_shard_table_capacity_rows", "rows allocated", labels=labels)
    refused = CounterMetricFamily("streamrec_shard_refused_keys", "keys given no row or no update, by reason",
                                  labels=(*labels, "reason"))
    evicted = CounterMetricFamily("streamrec_shard_evicted_rows", "rows evicted, by reason", labels=(*labels, "reason"))
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


def shard_registry(server: ShardServer) -> CollectorRegistry:
    """A registry of its own (no process-global state) holding ``server``'s metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ShardCollector(server))
    return registry
