"""Model quality does not depend on how fast records arrive.

The same planted events reach the trainer as a 20,000 records/s replay does (Kafka polls of
4,096) and as a 500 records/s stream does (polls of ~50 every 0.1 s); both go through the
job's :class:`trainer.minibatch.MiniBatcher` with the JobConfig defaults and train the
default `up` model in-process. Holdout AUC agrees within 0.01. The batcher's clock is the
stream's own time (records / rate), so the test does not depend on the machine's speed. A third
arm is a trainer that keeps up with the slow stream: every poll reaches the log's end
(``caught_up``), so it trains each poll of 50 at once; its AUC agrees too. A fourth is the
fast stream behind a backlog, whose steps grow (trainer.minibatch); its AUC agrees too.
"""

from __future__ import annotations

import numpy as np
import pytest

from launcher.system_config import default_model, load_config
from logrecords.batch import Batch
from logrecords.generator import PlantedModel, roc_auc
from logrecords.parsers import make_parser
from logrecords.sample_encoding import generated_json_schema, json_lines
from models import build_model
from streaming.offsets import OffsetTracker
from trainer.minibatch import BACKLOG_GROWTH, MiniBatcher
from trainer.params import LocalStore
from trainer.worker import Worker, prepare

TRAIN, HOLDOUT = 60_000, 5_000
DEFAULTS = load_config(None).train  # what `up` runs: batch_size, batch_wait_ms, dense_sync_steps


def polls(lines: list[bytes], size: int) -> list[Batch]:
    """The stream as Kafka polls of ``size`` records, with their partition-0 offsets."""
    parser = make_parser(generated_json_schema())
    out = []
    for lo in range(0, len(lines), size):
        batch, rejected = parser.parse(lines[lo:lo + size])
        assert not rejected
        out.append(Batch(**{**batch.__dict__, "positions": {0: (lo, lo + len(batch) - 1)}}))
    return out


def train_at_rate(lines: list[bytes], holdout: Batch, *, rate: float, poll_size: int,
                  caught_up: bool = False, grow: bool = False) -> tuple[float, list[int]]:
    """Holdout AUC after training ``lines`` arriving at ``rate`` records/s in polls of ``poll_size``
    (``grow``: full polls of a backlog grow the steps, as in the job); also the sizes of the steps
    taken. Every poll's offsets end up marked pushed, in order."""
    now = [0.0]
    batcher = MiniBatcher(DEFAULTS.batch_size, DEFAULTS.batch_wait_ms / 1000, poll_size=poll_size if grow else None,
                          clock=lambda: now[0])
    model = build_model(default_model())
    worker = Worker(model, LocalStore(model.tables, model.params.values), dense_sync_steps=DEFAULTS.dense_sync_steps)
    tracker, steps = OffsetTracker(), []
    for poll in [*polls(lines, poll_size), None]:  # the stream ends: an empty poll
        if poll is not None:
            now[0] += len(poll) / rate
            tracker.issued(poll)
        for mini in batcher.add(poll, caught_up=caught_up):
            worker.step(prepare(model, mini.batch))
            steps.append(len(mini.batch))
            for done in mini.completes:
                tracker.mark_pushed(done)
    assert tracker.committable() == {0: len(lines)} and tracker.in_flight() == 0
    return roc_auc(holdout.labels, worker.score(holdout)), steps


@pytest.mark.slow
def test_holdout_auc_does_not_depend_on_arrival_rate() -> None:
    lines = json_lines(PlantedModel(seed=5).sample(TRAIN + HOLDOUT))
    holdout = polls(lines[TRAIN:], HOLDOUT)[0]
    fast, fast_steps = train_at_rate(lines[:TRAIN], holdout, rate=20_000, poll_size=4096)
    slow, slow_steps = train_at_rate(lines[:TRAIN], holdout, rate=500, poll_size=50)
    kept_up, kept_up_steps = train_at_rate(lines[:TRAIN], holdout, rate=500, poll_size=50, caught_up=True)
    behind, behind_steps = train_at_rate(lines[:TRAIN], holdout, rate=20_000, poll_size=4096, grow=True)
    print(f"holdout AUC: 20,000/s polls of 4096 {fast:.4f}, behind a backlog {behind:.4f}; 500/s polls of 50 "
          f"{slow:.4f}, caught up {kept_up:.4f}")
    assert sum(fast_steps) == sum(slow_steps) == TRAIN
    size = DEFAULTS.batch_size
    assert set(fast_steps[:16]) == {size}  # a poll of 4096: 16 steps of 256
    assert size <= np.median(slow_steps) <= 1.5 * size  # small polls were joined
    assert abs(fast - slow) < 0.01, (fast, slow)
    assert set(kept_up_steps) == {50} and abs(fast - kept_up) < 0.01, (fast, kept_up)
    grown = BACKLOG_GROWTH * size  # a backlog grows the steps: the model still learns as well
    assert set(behind_steps[:4096 // grown]) == {grown} and abs(behind - slow) < 0.01, (behind, slow)
    assert min(fast, slow) > 0.55  # it learned (the 4096-record steps of a fixed batch size reached ~0.52 here)
