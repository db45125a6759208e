"""Training mini-batches of ``train.batch_size`` records, whatever the size of Kafka's polls.

A poll holds what arrived within ``kafka.batch_timeout_ms`` (up to ``kafka.batch_size``): a few
dozen records at 500 records/s, 4,096 in a replay at 20,000/s. Trained as they come, the
step count (and so the model) would depend on the arrival rate. :class:`MiniBatcher` holds
polls until they hold ``size`` records, or the first of them waited ``wait_s``, or a poll came
back empty, or the consumer has caught up with the log (``caught_up``: nothing more is waiting
in Kafka, so holding the records would only delay them); then the held group
of ``n`` records is trained as ``round(n / size)`` (at least one) near-equal mini-batches, in
record order: steps of ``size`` records give or take a half (polls are joined whole: 6 polls
of 50 make one step of 300, not two of 150). A big poll becomes several mini-batches, small
polls are joined into one. Under a backlog polls are full and steps are ``size`` whatever the
arrival rate; a trainer that keeps up with a slow stream trains what arrived since its last
step (smaller steps, each record trained at once; holdout AUC unchanged, see
tests/trainer/test_minibatch_quality.py).

Under a backlog steps grow, the way Paddle's and Monolith's streaming trainers take what is
there: a trainer that cannot keep up at ``size`` pays the step's fixed costs (the PS round
trips, the dense update, Python) per record less often. A full poll (``poll_size`` records: that
many were waiting) means a backlog: its steps are up to ``BACKLOG_GROWTH`` x ``size``; a trainer
that keeps up gets short polls and trains at ``size``. The rule reads the poll's size only (not a
lag sampled in time, nor whether this poll happened to reach the log's end), so a stream replayed
from a pass trains the same steps as the first time (a resumed job matches a clean run,
tests/trainer/test_streaming_job.py). A growth of 2 catches up with nearly the whole backlog
that 4 does while keeping the holdout AUC within the quality test's 0.01 of a slow stream's
(bench/RESULTS.md).

The offset rule (:mod:`streaming.offsets`) holds per poll: a poll's span is marked pushed
after the step of the mini-batch holding its LAST record (``MiniBatch.completes``), so its
offsets never become committable before every one of its records was pushed. Polls held
here are issued but not pushed: a checkpoint taken meanwhile resumes before them. The last
mini-batch of a group ends on a poll boundary (``ends_group``): a pass that ends there
records offsets that are exactly the records it trained.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from logrecords.batch import Batch, concat_batches

BACKLOG_GROWTH = 2  # steps of up to this many times the size meanwhile


@dataclass(frozen=True)
class MiniBatch:
    """One training step's records (``batch.positions`` is empty: offsets go by ``completes``)."""

    batch: Batch
    completes: tuple[Batch, ...]  # polls whose last record is in this mini-batch: mark them pushed after its step
    ends_group: bool  # no poll is partly trained after this step


class MiniBatcher:
    """Turns polls into mini-batches of about ``size`` records (the module docstring)."""

    def __init__(self, size: int, wait_s: float, *, poll_size: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if size < 1:
            raise ValueError(f"mini-batch size must be >= 1, got {size}")
        self.size = size
        self.wait_s = wait_s
        self.poll_size = poll_size  # a full Kafka poll (None: steps never grow)
        self.clock = clock
        self.grown_steps = 0  # steps trained above ``size`` under a backlog
        self._held: list[Batch] = []
        self._held_n = 0
        self._held_since = 0.0

    @property
    def held(self) -> int:
        """Records waiting for a mini-batch."""
        return self._held_n

    def add(self, poll: Batch | None, *, caught_up: bool = False) -> list[MiniBatch]:
        """Take a poll (None: nothing arrived, so whatever is held goes now); returns the
        mini-batches ready to train, in order. ``caught_up``: the consumer read its log to the
        end with this poll, so no more records are waiting and the held ones go now. A full
        poll is a backlog: its steps grow."""
        if poll is None:
            return self.flush()
        if len(poll) == 0:
            raise ValueError("an empty poll has nothing to train (the consumer issues None instead)")
        if not self._held:
            self._held_since = self.clock()
        self._held.append(poll)
        self._held_n += len(poll)
        if caught_up or self._held_n >= self.size or self.clock() - self._held_since >= self.wait_s:
            behind = self.poll_size is not None and len(poll) >= self.poll_size
            return self.flush(step=self.size * BACKLOG_GROWTH if behind else self.size)
        return []

    def flush(self, step: int | None = None) -> list[MiniBatch]:
        """Every held record, as near-equal mini-batches of about ``step`` (default ``size``)."""
        step = step or self.size
        polls, n = self._held, self._held_n
        self._held, self._held_n = [], 0
        if not polls:
            return []
        joined = polls[0] if len(polls) == 1 else concat_batches(polls)
        joined = dataclasses.replace(joined, positions={})
        parts = max(1, round(n / step))
        if n / parts > 1.5 * self.size:
            self.grown_steps += parts
        bounds = [n * i // parts for i in range(parts + 1)]
        ends = np.cumsum([len(p) for p in polls])  # one past each poll's last row
        out = []
        for lo, hi in itertools.pairwise(bounds):
            batch = joined if parts == 1 else joined.take(np.arange(lo, hi))
            completes = tuple(p for p, end in zip(polls, ends, strict=True) if lo < end <= hi)
            out.append(MiniBatch(batch, completes, ends_group=hi == n))
        return out
