"""When a pass ends: every N records or T seconds, whichever comes first (separate from the step)."""

from __future__ import annotations

import time

from trainer.job_config import PassConfig


class PassClock:
    """Counts a worker's records in the current pass; ``records`` is this worker's share of N."""

    def __init__(self, config: PassConfig, *, workers: int = 1) -> None:
        self.records = None if config.records is None else max(1, config.records // workers)
        self.seconds = config.seconds
        self.pass_id = 0
        self.count = 0
        self.started = time.monotonic()

    def add(self, n: int) -> None:
        self.count += n

    def due(self) -> bool:
        if self.records is not None and self.count >= self.records:
            return True
        return self.seconds is not None and time.monotonic() - self.started >= self.seconds

    def next_pass(self, pass_id: int) -> None:
        self.pass_id = pass_id
        self.count = 0
        self.started = time.monotonic()
