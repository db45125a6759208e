"""HELP text of every metric the service reads at scrape time (``ServiceMetrics.gauge`` and
``.counter``), keyed by the name after ``streamrec_``: what it measures, its unit, when it moves.
A metric registered without an entry here is refused when the app is created."""

from __future__ import annotations

HELP = {
    "requests_in_progress": "HTTP requests between their head's arrival and their response's end.",
    "work_in_progress": "CPU-bound request jobs running or queued for a worker thread (bounded by limits).",
    "access_log_dropped": "Access-log lines not written: every queue slot was taken (a request never waits for "
                          "the log) or the write failed.",
    "work_refused": "Requests refused with 503 because every worker thread and queue slot was taken.",
    "connections_header_timeout": "Connections closed because their request head did not arrive in time.",
    "connections_closed_for_room": "Idle keep-alive connections closed to make room for new ones.",
    "bundle_version": "Version (pass id) of the exported bundle being served; steps up at each bundle swap.",
    "bundle_freshness_seconds": "Age of the served bundle's newest trained record when the bundle was loaded "
                                "(seconds); moves at each bundle swap.",
    "bundle_apply_seconds": "Seconds the last bundle swap took to load and index the bundle.",
    "bundles_rejected": "Bundles that failed to load and were skipped (the previous one stays served).",
    "bundles_vanished": "Bundles deleted by retention between their listing and their load (skipped, harmless).",
    "index_items": "Item vectors in the served nearest-neighbour index.",
    "training_lag_records": "Records the training job has not consumed yet, from the chief's job status "
                            "(refreshed every few seconds); absent without a job link.",
    "training_lag_seconds": "Seconds between now and the event time of the newest record the job trained.",
    "training_auc": "Progressive AUC (0..1) the training job reports, the running pass's else the last one's.",
    "history_freshness_p50_seconds": "Median seconds from a record's receipt to its positives in the user "
                                     "history that recommendations read live.",
    "history_freshness_p95_seconds": "95th percentile of the receipt to user-history seconds.",
    "live_item_freshness_p50_seconds": "Median seconds from a pushed item change's receipt to its vector in "
                                       "the served index (live path).",
    "live_item_freshness_p95_seconds": "95th percentile of the receipt to index seconds of the live path.",
    "live_row_freshness_p50_seconds": "Median seconds from receipt to a changed row served by read-through.",
    "live_row_freshness_p95_seconds": "95th percentile of the receipt to served row seconds of read-through.",
    "live_reached_timestamp_seconds": "Receipt time (unix seconds) of the newest live change applied to the index.",
    "live_paused": "1 while the live path is stopped (the shards restarted or rolled back) until a newer bundle, "
                   "else 0.",
    "live_items_refreshed": "Item vectors the live path refreshed in the index (rate: items/s).",
    "live_item_batches": "Batches of item changes the live path applied to the index.",
    "read_through_served": "Embedding lookups answered with live rows read from the shards.",
    "read_through_unavailable": "Read-through lookups the shards did not answer in time, served from the bundle.",
    "recommend_cold_start": "Recommendations for users with no embedding, served from the cold-start list.",
    "exports_free_bytes": "Bytes free on the exports directory's file system; absent on an object store.",
    "exports_bytes": "Bytes of the bundles under the exports directory.",
    "checkpoints_free_bytes": "Bytes free on the trainer's checkpoint file system, from the chief's job status.",
    "checkpoints_bytes": "Bytes of the trainer's checkpoints, from the chief's job status.",
    "training_disk_full": "1 while the trainer's writes fail for want of disk space (from its job status), else 0.",
}
