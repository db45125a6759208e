"""Back-pressure for a replay: produce no faster than the trainers consume.

The lag is the records on the topic the trainers have not consumed: the log's end (known to
the producer itself: the ends when it started plus what it sent, flushed) minus the offsets
committed to the consumer group (the chief commits each pass's offsets there,
:mod:`streaming.group_offsets`; a partition without a commit counts from the stream's start).
Before each chunk the producer asks :meth:`LagGate.wait`, which returns once the lag is at most
``max_lag`` and otherwise waits, asking again every ``poll_s``. So the lag stays below
``max_lag`` plus one chunk, whatever the file's size, and a fast replay never buries the
trainers in one poll after another. Each lag read is kept as a sample (and reported).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient
from kafka.errors import KafkaError

POLL_S = 0.2  # a paused replay asks again this often
STALL_S = 30.0  # a pause this long is logged as a warning (every STALL_S)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LagSample:
    """One read of the lag: records sent by then, the lag (None: the broker did not answer)."""

    sent: int
    lag: int | None
    max_lag: int

    def as_dict(self) -> dict[str, Any]:
        return {"event": "lag", "sent": self.sent, "lag": self.lag, "max_lag": self.max_lag}


class GroupLag:
    """Records on ``topic`` past ``group``'s committed offsets, for a producer that knows the
    log's end: ``lag(end)``, ``end`` the sum of the partitions' end offsets."""

    def __init__(self, options: dict[str, Any], *, topic: str, group: str, since: Mapping[int, int]) -> None:
        self.topic, self.group = topic, group
        self.since = dict(since)
        self._options = options
        self._admin: KafkaAdminClient | None = None

    def committed(self) -> dict[int, int] | None:
        """The group's committed offset of each partition (``since`` where it has none), or None."""
        try:
            if self._admin is None:
                self._admin = KafkaAdminClient(**self._options)
            got = self._admin.list_group_offsets(self.group).get(self.group, {})
        except (KafkaError, OSError, ValueError):
            return None
        out = dict(self.since)
        for tp, om in got.items():
            if tp.topic == self.topic and tp.partition in out and om.offset >= 0:
                out[tp.partition] = int(om.offset)
        return out

    def __call__(self, end: int) -> int | None:
        committed = self.committed()
        return None if committed is None else max(0, int(end) - sum(committed.values()))

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None


class LagGate:
    """Waits while the lag is above ``max_lag`` (module docstring); ``report`` gets each sample."""

    def __init__(self, lag: Callable[[], int | None], *, max_lag: int, poll_s: float = POLL_S,
                 report: Callable[[LagSample], None] | None = None) -> None:
        self.lag = lag
        self.max_lag = max_lag
        self.poll_s = poll_s
        self.report = report
        self.highest: int | None = None  # the highest lag read
        self.pauses = 0  # times the gate held the producer back

    def wait(self, sent: int) -> None:
        paused = False
        since = time.monotonic()
        while True:
            if time.monotonic() - since >= STALL_S:  # nothing moved the group: say so, loudly, and keep waiting
                log.warning("paused for %.0f s: the consumer group still lags by more than %d records "
                            "(does anything commit its offsets?)", STALL_S, self.max_lag)
                since = time.monotonic()
            sample = LagSample(sent, self.lag(), self.max_lag)
            if sample.lag is not None:
                self.highest = max(sample.lag, self.highest or 0)
            if self.report is not None:
                self.report(sample)
            if sample.lag is not None and sample.lag <= self.max_lag:
                return
            if not paused:
                paused = True
                self.pauses += 1
            time.sleep(self.poll_s)
