"""A trainer's Prometheus metrics, read from its :class:`trainer.job.StreamingJob` when scraped.

The step loop pays nothing for them: the job already keeps the records it trained, the consumer
lag (looked up about once a second by the poll loop), where the pass stands, each commit's stall
and the seconds of each step phase; the chief keeps the manifest of the newest pass it committed,
whose progress point holds the pass's progressive AUC and log loss. :class:`TrainerCollector`
reads them in the metrics thread (:mod:`core.metrics_http`). A figure not known yet (no lag
looked up, no pass committed by this process, a worker that is not the chief) is left out.

Label values come from closed sets: ``rank`` this worker's rank, ``phase`` a step phase of
:class:`trainer.worker.Worker`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from trainer.job import StreamingJob

# name, help, key of the chief's last committed pass's progress point (trainer.pass_history)
LAST_PASS = (
    ("streamrec_trainer_last_pass_auc", "progressive AUC of the last committed pass (all workers)", "auc"),
    ("streamrec_trainer_last_pass_logloss", "progressive log loss of the last committed pass", "logloss"),
    ("streamrec_trainer_auc_total", "progressive AUC of every pass up to the last committed one", "auc_total"),
    ("streamrec_trainer_last_pass_records_per_second", "records per second of the last committed pass",
     "records_per_s"),
    ("streamrec_trainer_last_pass_freshness_seconds", "age of the newest record at the last commit", "freshness_s"),
)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class TrainerCollector(Collector):
    """Metric families of one streaming-job worker (module docstring)."""

    def __init__(self, job: StreamingJob) -> None:
        self.job = job

    def collect(self) -> Iterator[Metric]:
        job, progress = self.job, self.job.progress
        rank = (str(job.rank),)

        def gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
            if value is not None:
                family = GaugeMetricFamily(name, doc, labels=("rank",))
                family.add_metric(rank, value)
                yield family

        def counter(name: str, doc: str, value: float) -> Iterator[Metric]:
            family = CounterMetricFamily(name, doc, labels=("rank",))
            family.add_metric(rank, value)
            yield family

        yield from counter("streamrec_trainer_records_trained", "records trained by this worker process "
                           "(rate: samples/s)", job.records_run)
        yield from gauge("streamrec_trainer_job_records", "records of every worker up to this worker's position, "
                         "as the passes count them", progress.records_total)
        yield from gauge("streamrec_trainer_consumer_lag_records", "records not yet consumed on this worker's "
                         "partitions", progress.lag)
        yield from gauge("streamrec_trainer_pass", "newest pass committed, restored or rolled back to",
                         progress.pass_id)
        yield from gauge("streamrec_trainer_pass_records", "records this worker trained in the current pass",
                         progress.clock.count)
        yield from gauge("streamrec_trainer_pass_elapsed_seconds", "seconds since the current pass started",
                         max(0.0, time.monotonic() - progress.clock.started))
        stalls = job.commit_stall_s
        yield from gauge("streamrec_trainer_commit_stall_seconds", "seconds the last commit held this worker's loop",
                         stalls[-1] if stalls else None)
        yield from gauge("streamrec_trainer_paused", "1 while paused by job control", float(job.paused.is_set()))
        yield from gauge("streamrec_trainer_newest_record_timestamp_seconds", "event time of the newest record "
                         "trained", progress.newest_time)
        yield from counter("streamrec_trainer_recoveries", "reloads of a complete pass after a lost shard",
                           job.recovery.recoveries)
        yield from counter("streamrec_trainer_regroups", "regroups after the membership epoch moved",
                           job.recovery.regroups)
        yield from self._disk(gauge, counter, rank)
        worker = job.worker
        if worker is not None:
            phases = CounterMetricFamily("streamrec_trainer_phase_seconds", "seconds spent in each step phase",
                                         labels=("rank", "phase"))
            for phase, seconds in sorted(dict(worker.phase_seconds).items()):
                phases.add_metric((*rank, phase), seconds)
            yield phases
        yield from self._last_pass(gauge)

    def _disk(self, gauge: Any, counter: Any, rank: tuple[str]) -> Iterator[Metric]:
        """Failed writes for want of space (trainer.disk_space) and the roots' free and used bytes."""
        job = self.job
        disk = job.committer.disk
        yield from gauge("streamrec_trainer_disk_full", "1 while a write fails for want of disk space "
                         "(training pauses or goes back to the last complete pass)", float(disk.full))
        failures = CounterMetricFamily("streamrec_trainer_disk_write_failures", "writes that failed for want of "
                                       "disk space, by what was written", labels=("rank", "what"))
        for what, n in sorted(disk.failures.items()):
            failures.add_metric((*rank, what), n)
        yield failures
        yield from counter("streamrec_trainer_disk_recoveries", "passes the disk had no room for, gone back from",
                           job.recovery.disk_recoveries)
        exporter = job.committer.exporter
        if exporter is not None:
            yield from counter("streamrec_trainer_bundles_retired", "bundles deleted by retention", exporter.retired)
            yield from counter("streamrec_trainer_bundle_retention_failures",
                               "retention passes that failed (tried again after the next export)",
                               exporter.retention_failures)
        usage = job.disk_usage.read()
        for root in ("checkpoint", "export"):
            yield from gauge(f"streamrec_trainer_{root}_free_bytes", f"bytes free on the {root} root's file system",
                             usage.get(f"{root}_free_bytes"))
            yield from gauge(f"streamrec_trainer_{root}_bytes", f"bytes of the files under the {root} root",
                             usage.get(f"{root}_bytes"))

    def _last_pass(self, gauge: Any) -> Iterator[Metric]:
        """The chief's newest committed pass (its manifest's progress point)."""
        manifest = self.job.committer.last_commit
        point = manifest.get("progress") or {}
        for name, doc, key in LAST_PASS:
            yield from gauge(name, doc, _number(point.get(key)))
        records, rate = _number(point.get("records")), _number(point.get("records_per_s"))
        yield from gauge("streamrec_trainer_last_pass_seconds", "duration of the last committed pass",
                         records / rate if records and rate else None)
        yield from gauge("streamrec_trainer_last_commit_timestamp_seconds", "when the last pass was committed "
                         "(unix time)", _number(manifest.get("created_at")))


def trainer_registry(job: StreamingJob) -> CollectorRegistry:
    """A registry of its own (no process-global state) holding ``job``'s metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainerCollector(job))
    return registry
