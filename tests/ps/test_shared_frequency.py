"""The job's one item-frequency estimate on real shard processes (trainer.shared_frequency): two
workers' steps, interleaved, give the estimate one worker would keep of both streams; it survives
restarted shards from their saves; a resent step is counted once but still answered; bad
requests are refused naming what was wrong."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import zmq

from core.errors import InvalidInput, ShardRestarted
from models.item_frequency import ItemFrequency
from ps import protocol
from ps.admin import SaveMode
from ps.protocol import Message, Op
from tables.id_rows_table import RATE_CLOCK_KEY, RATE_WORDS
from trainer.shared_frequency import RATES_TABLE, SharedItemFrequency

from .ps_harness import shard_processes

pytestmark = pytest.mark.process

EMB = {"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}
ITEMS = np.arange(1, 61, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # 60 item hashes


def _steps(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, ITEMS.shape[0] + 1) ** 1.1
    return [ITEMS[rng.choice(ITEMS.shape[0], size=rng.integers(0, 20), p=p / p.sum())] for _ in range(n)]


def test_two_workers_share_one_estimate_that_survives_restarted_shards(tmp_path: Path) -> None:
    ref = ItemFrequency(buckets=1 << 16, hashes=2, alpha=0.1)  # 60 items in 65,536 buckets: no collision here
    a_steps, b_steps = _steps(150, seed=1), _steps(150, seed=2)
    with shard_processes(tmp_path, [EMB]) as shards, shards.client() as ca, shards.client() as cb:
        a, b = SharedItemFrequency(ca, 0.1), SharedItemFrequency(cb, 0.1)
        for k, (sa, sb) in enumerate(zip(a_steps, b_steps, strict=True)):
            np.testing.assert_allclose(a.observe(sa, ITEMS), ref.observe(sa, ITEMS), rtol=1e-5)
            np.testing.assert_allclose(b.observe(sb, ITEMS), ref.observe(sb, ITEMS), rtol=1e-5)
            if k == 99:
                ca.admin.save(mode=SaveMode.BASE)  # a pass: the rates and each shard's clock with them
                saved = copy.deepcopy(ref)
        for i in range(2):  # both shards back to the pass
            shards.kill(i)
            shards.start(i)
        shards.wait_healthy()
        with pytest.raises(ShardRestarted):
            a.observe(ITEMS[:0], ITEMS)
        # the probe above counted one step on each shard; so does the reference
        saved.update(ITEMS[:0])
        for sa in a_steps[100:]:
            np.testing.assert_allclose(a.observe(sa, ITEMS), saved.observe(sa, ITEMS), rtol=1e-5)


def test_a_resent_step_is_counted_once_and_still_answered(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1) as shards:
        step = Message(Op.RATES, 41, RATES_TABLE, [ITEMS[:5], ITEMS[:3]], {"alpha": 0.5})
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, b"resending-trainer")
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(shards.endpoints[0])
        answers = []
        try:
            for flags in (protocol.Flag.NONE, protocol.Flag.RETRY):
                step.flags = flags
                sock.send_multipart(protocol.encode(step))
                assert sock.poll(5000)
                reply = protocol.decode(sock.recv_multipart())
                assert reply.status == protocol.STATUS_OK
                answers.append(reply.arrays[0].copy())
        finally:
            sock.close()
        np.testing.assert_array_equal(answers[0], answers[1])
        with shards.client() as c:
            rows, _ = c.wait(c.read_id_rows(RATES_TABLE, np.array([RATE_CLOCK_KEY], np.uint64), words=RATE_WORDS))
            assert rows[0, 0] == 1  # one step counted


def test_bad_rates_requests_are_refused_naming_the_field(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1) as shards, shards.client() as c:
        with pytest.raises(InvalidInput, match="alpha"):
            c.wait(c.rates(RATES_TABLE, ITEMS[:2], ITEMS[:2], alpha=2.0))
        with pytest.raises(InvalidInput, match="clock"):
            c.wait(c.rates(RATES_TABLE, np.array([RATE_CLOCK_KEY], np.uint64), ITEMS[:2], alpha=0.1))
        with pytest.raises(InvalidInput, match="id-rows"):
            c.wait(c.rates("emb_rates", ITEMS[:2], ITEMS[:2], alpha=0.1))
        with pytest.raises(InvalidInput, match="uint64"):
            c.wait(c.rates(RATES_TABLE, ITEMS[:2].astype(np.int64), ITEMS[:2], alpha=0.1))
        # nothing was counted; the estimate works after them
        assert SharedItemFrequency(c, 0.1).observe(ITEMS[:2], ITEMS[:2]).shape == (2,)
