"""When a pass ends: every N records or T seconds, whichever comes first (separate from the step), or,
with ``idle_seconds``, once the pass's records stopped coming; where a worker stands between passes.

A pass holds records: T seconds with none on this worker end no pass (no save, no export, no
bundle: an idle system writes nothing to its run directory). That look is the worker's
heartbeat (``idle_checks``, ``idle_at``, shown in its status) and starts the clock over, so
the first records after an idle spell commit T seconds later. A worker with nothing of its
own still joins a pass another worker ends (trainer.job), so every record is committed on
the cadence while records flow."""

from __future__ import annotations

import time

from trainer.job_config import PassConfig


class PassClock:
    """Counts a worker's records in the current pass; ``records`` is this worker's share of N."""

    def __init__(self, config: PassConfig, *, workers: int = 1) -> None:
        self.records = None if config.records is None else max(1, config.records // workers)
        self.seconds = config.seconds
        self.idle_seconds = config.idle_seconds
        self.pass_id = 0
        self.count = 0
        self.started = time.monotonic()
        self.last_record = self.started  # when add() last counted records
        self.idle_checks = 0  # T-second looks that found no record in the pass (the heartbeat)
        self.idle_at: float | None = None  # wall time of the last one

    def add(self, n: int) -> None:
        self.count += n
        if n:
            self.last_record = time.monotonic()

    def due(self) -> bool:
        if self.records is not None and self.count >= self.records:
            return True
        if self.idle_seconds is not None and self.count and time.monotonic() - self.last_record >= self.idle_seconds:
            return True
        if self.seconds is None or time.monotonic() - self.started < self.seconds:
            return False
        if self.count:
            return True
        self.idle_checks += 1  # nothing changed since the last pass: a heartbeat, not a pass
        self.idle_at = time.time()
        self.started = time.monotonic()
        return False

    def next_pass(self, pass_id: int) -> None:
        self.pass_id = pass_id
        self.count = 0
        self.started = time.monotonic()


class PassProgress:
    """Where this worker stands between passes; shared by the job, its PassCommitter and its Recovery."""

    def __init__(self, config: PassConfig, *, workers: int) -> None:
        self.clock = PassClock(config, workers=workers)  # the pass being trained (clock.pass_id)
        self.pass_id = 0  # the newest pass committed, restored or rolled back to (0: none yet)
        self.records_total = 0  # records of every worker up to here, as the passes' manifests count them
        # when the newest record this worker trained on was received (its Kafka timestamp), else its
        # event time (file data): freshness counts from receipt, so a replayed old log is fresh
        self.newest_time: float | None = None
        self.lag: int | None = None  # records not yet consumed on this worker's partitions (last look)
        self.active = list(range(workers))  # ranks still training (a worker whose stream ended leaves)
        # set by a rollback or a regroup: the loop re-seeks the stream to these offsets
        self.reseek: dict[int, int] | None = None

    def at_pass(self, pass_id: int) -> None:
        """Pass ``pass_id`` is the newest one this worker stands on; the next one starts."""
        self.pass_id = pass_id
        self.clock.next_pass(pass_id + 1)
