"""A trainer's Prometheus metrics, read from its :class:`trainer.job.StreamingJob` when scraped.

The step loop pays nothing for them: the job already keeps the records it trained, the consumer
lag (looked up about once a second by the poll loop), where the pass stands, each commit's stall
and the seconds of each step phase; the chief keeps the manifest of the newest pass it committed,
whose progress point holds the pass's progressive AUC and log loss. :class:`TrainerCollector`
reads them in the metrics thread (:mod:`core.metrics_http`). A figure not known yet (no lag
looked up, no pass committed by this process, a worker that is not the chief) is left out.

Label values come from closed sets: ``rank`` this worker's rank, ``phase`` a step phase of
:class:`trainer.worker.Worker`, ``reason`` a :class:`logrecords.rejects.RejectReason`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.role_registry import role_registry
from logrecords.rejects import RejectReason

if TYPE_CHECKING:
    from trainer.job import StreamingJob

# name, key of the chief's last committed pass's progress point (trainer.pass_history)
LAST_PASS = (
    ("streamrec_trainer_last_pass_auc", "auc"),
    ("streamrec_trainer_last_pass_logloss", "logloss"),
    ("streamrec_trainer_auc_total", "auc_total"),
    ("streamrec_trainer_last_pass_records_per_second", "records_per_s"),
    ("streamrec_trainer_last_pass_freshness_seconds", "freshness_s"),
)
REJECT_REASONS = tuple(r.label for r in RejectReason if r is not RejectReason.OK)

HELP = {
    "streamrec_trainer_records_trained": "Records this worker process trained since it started (rate: samples/s).",
    "streamrec_trainer_job_records": "Records of every worker up to this worker's position, as the passes count "
                                     "them (carried over a restart).",
    "streamrec_trainer_consumer_lag_records": "Records in Kafka not yet consumed on this worker's partitions, "
                                              "looked up about once a second; rising: training falls behind.",
    "streamrec_trainer_pass": "Id of the newest pass committed, restored or rolled back to; steps up at each commit.",
    "streamrec_trainer_pass_records": "Records this worker trained in the current, uncommitted pass; back to 0 at "
                                      "each commit.",
    "streamrec_trainer_pass_elapsed_seconds": "Seconds since the current pass started; back to 0 at each commit.",
    "streamrec_trainer_commit_stall_seconds": "Seconds the last commit held this worker's training loop.",
    "streamrec_trainer_paused": "1 while job control has paused training, else 0.",
    "streamrec_trainer_newest_record_timestamp_seconds": "Event time (unix seconds) of the newest record trained.",
    "streamrec_trainer_recoveries": "Reloads of the last complete pass after a shard lost its tables (a shard "
                                    "restarted).",
    "streamrec_trainer_regroups": "Regroups of the workers after the membership epoch moved (a worker or shard "
                                  "was replaced).",
    "streamrec_trainer_rejected_records": "Records the stream refused and sent to the dead-letter topic, by reason "
                                          "(bad_hex, invalid_json, oversized...); rises with bad input upstream.",
    "streamrec_trainer_absent_field_records": "Records that lacked a field the schema requires, by field: trained "
                                              "with its default, or refused (absent_field) once more than the "
                                              "schema's max_absent_share of the records lacked it.",
    "streamrec_trainer_dead_letter_failures": "Rejected records that could not be written to the dead-letter topic "
                                              "(counted, dropped; training goes on).",
    "streamrec_trainer_phase_seconds": "Seconds this worker spent in each step phase (rate: share of wall time).",
    "streamrec_trainer_disk_full": "1 while a write fails for want of disk space (training pauses or goes back to "
                                   "the last complete pass), else 0.",
    "streamrec_trainer_disk_write_failures": "Writes that failed for want of disk space, by what was written.",
    "streamrec_trainer_disk_recoveries": "Passes the disk had no room for, gone back from to the last complete one.",
    "streamrec_trainer_bundles_retired": "Exported bundles deleted by retention (passes.keep).",
    "streamrec_trainer_bundle_retention_failures": "Retention runs that failed to delete old bundles (tried again "
                                                   "after the next export).",
    "streamrec_trainer_checkpoint_free_bytes": "Bytes free on the checkpoint root's file system (read at most "
                                               "every 5 s); absent on an object store.",
    "streamrec_trainer_checkpoint_bytes": "Bytes of the files under the checkpoint root (read at most every 5 s).",
    "streamrec_trainer_export_free_bytes": "Bytes free on the export root's file system (read at most every 5 s); "
                                           "absent on an object store.",
    "streamrec_trainer_export_bytes": "Bytes of the files under the export root (read at most every 5 s).",
    "streamrec_trainer_last_pass_auc": "Progressive AUC (0..1) of the last committed pass, all workers; moves at "
                                       "each commit.",
    "streamrec_trainer_last_pass_logloss": "Progressive log loss of the last committed pass; moves at each commit.",
    "streamrec_trainer_auc_total": "Progressive AUC (0..1) of every pass up to the last committed one.",
    "streamrec_trainer_last_pass_records_per_second": "Records per second the job trained in the last committed "
                                                      "pass.",
    "streamrec_trainer_last_pass_freshness_seconds": "Seconds from the newest trained record's event time to the "
                                                     "last commit.",
    "streamrec_trainer_last_pass_seconds": "Seconds the last committed pass took, from its start to its commit.",
    "streamrec_trainer_last_commit_timestamp_seconds": "When the last pass was committed (unix seconds); only on "
                                                       "the chief, once it committed one.",
}
"""Each metric's HELP: what it counts, in what unit, and when it moves."""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class TrainerCollector(Collector):
    """Metric families of one streaming-job worker (module docstring)."""

    def __init__(self, job: StreamingJob) -> None:
        self.job = job

    def collect(self) -> Iterator[Metric]:
        job, progress = self.job, self.job.progress
        rank = (str(job.rank),)

        def gauge(name: str, value: float | None) -> Iterator[Metric]:
            if value is not None:
                family = GaugeMetricFamily(name, HELP[name], labels=("rank",))
                family.add_metric(rank, value)
                yield family

        def counter(name: str, value: float) -> Iterator[Metric]:
            family = CounterMetricFamily(name, HELP[name], labels=("rank",))
            family.add_metric(rank, value)
            yield family

        yield from counter("streamrec_trainer_records_trained", job.records_run)
        yield from gauge("streamrec_trainer_job_records", progress.records_total)
        yield from gauge("streamrec_trainer_consumer_lag_records", progress.lag)
        yield from gauge("streamrec_trainer_pass", progress.pass_id)
        yield from gauge("streamrec_trainer_pass_records", progress.clock.count)
        yield from gauge("streamrec_trainer_pass_elapsed_seconds", max(0.0, time.monotonic() - progress.clock.started))
        stalls = job.commit_stall_s
        yield from gauge("streamrec_trainer_commit_stall_seconds", stalls[-1] if stalls else None)
        yield from gauge("streamrec_trainer_paused", float(job.paused.is_set()))
        yield from gauge("streamrec_trainer_newest_record_timestamp_seconds", progress.newest_time)
        yield from counter("streamrec_trainer_recoveries", job.recovery.recoveries)
        yield from counter("streamrec_trainer_regroups", job.recovery.regroups)
        yield from self._rejected(rank)
        yield from self._disk(gauge, counter, rank)
        worker = job.worker
        if worker is not None:
            phases = CounterMetricFamily("streamrec_trainer_phase_seconds", HELP["streamrec_trainer_phase_seconds"],
                                         labels=("rank", "phase"))
            for phase, seconds in sorted(dict(worker.phase_seconds).items()):
                phases.add_metric((*rank, phase), seconds)
            yield phases
        yield from self._last_pass(gauge)

    def _rejected(self, rank: tuple[str]) -> Iterator[Metric]:
        """Records the stream refused, every reason from 0 so that the first dead letter is a rise, not a new series."""
        consumer = None if self.job.stream is None else self.job.stream.consumer
        counts = {} if consumer is None else consumer.reject_counts
        rejected = CounterMetricFamily("streamrec_trainer_rejected_records", HELP["streamrec_trainer_rejected_records"],
                                       labels=("rank", "reason"))
        for reason in REJECT_REASONS:
            rejected.add_metric((*rank, reason), counts.get(reason, 0))
        yield rejected
        absent = CounterMetricFamily("streamrec_trainer_absent_field_records",
                                     HELP["streamrec_trainer_absent_field_records"], labels=("rank", "field"))
        for name, n in sorted(({} if consumer is None else consumer.absent_counts).items()):
            absent.add_metric((*rank, name), n)
        yield absent
        failed = CounterMetricFamily("streamrec_trainer_dead_letter_failures",
                                     HELP["streamrec_trainer_dead_letter_failures"], labels=("rank",))
        failed.add_metric(rank, 0 if consumer is None else consumer.dead_letters.failed_sends)
        yield failed

    def _disk(self, gauge: Any, counter: Any, rank: tuple[str]) -> Iterator[Metric]:
        """Failed writes for want of space (trainer.disk_space) and the roots' free and used bytes."""
        job = self.job
        disk = job.committer.disk
        yield from gauge("streamrec_trainer_disk_full", float(disk.full))
        failures = CounterMetricFamily("streamrec_trainer_disk_write_failures",
                                       HELP["streamrec_trainer_disk_write_failures"], labels=("rank", "what"))
        for what, n in sorted(disk.failures.items()):
            failures.add_metric((*rank, what), n)
        yield failures
        yield from counter("streamrec_trainer_disk_recoveries", job.recovery.disk_recoveries)
        exporter = job.committer.exporter
        if exporter is not None:
            yield from counter("streamrec_trainer_bundles_retired", exporter.retired)
            yield from counter("streamrec_trainer_bundle_retention_failures", exporter.retention_failures)
        usage = job.disk_usage.read()
        for root in ("checkpoint", "export"):
            yield from gauge(f"streamrec_trainer_{root}_free_bytes", usage.get(f"{root}_free_bytes"))
            yield from gauge(f"streamrec_trainer_{root}_bytes", usage.get(f"{root}_bytes"))

    def _last_pass(self, gauge: Any) -> Iterator[Metric]:
        """The chief's newest committed pass (its manifest's progress point)."""
        manifest = self.job.committer.last_commit
        point = manifest.get("progress") or {}
        for name, key in LAST_PASS:
            yield from gauge(name, _number(point.get(key)))
        records, rate = _number(point.get("records")), _number(point.get("records_per_s"))
        yield from gauge("streamrec_trainer_last_pass_seconds", records / rate if records and rate else None)
        yield from gauge("streamrec_trainer_last_commit_timestamp_seconds", _number(manifest.get("created_at")))


def trainer_registry(job: StreamingJob) -> CollectorRegistry:
    """A registry of its own (no process-global state) holding ``job``'s metrics and its process's."""
    registry = role_registry("trainer")
    registry.register(TrainerCollector(job))
    return registry
