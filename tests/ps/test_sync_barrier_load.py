"""Sync barriers wait for live peers however long they take and fail only for a gone one: many
sync worker processes on a loaded machine, with a request timeout far below a step's wait."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from core.errors import Unavailable
from ps.client import PSClient
from ps.ps_config import ClientConfig

from .ps_harness import shard_processes

pytestmark = pytest.mark.process

ADA = {"name": "ada", "dim": 4, "optimizer": {"kind": "adagrad", "lr": 0.1}, "seed": 7}
WORKERS, STEPS, KEYS, BATCH = 32, 2, 300, 64


def test_thirty_two_sync_workers_pass_every_barrier_on_a_loaded_machine(tmp_path: Path) -> None:
    """Each worker's requests give up after 1 s (twice), far less than a barrier waits for the
    slowest of 32 processes starting and stepping on two busy cores: the barrier polls instead."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        with shard_processes(tmp_path, [ADA]) as shards:
            config = yaml.safe_load(shards.config.read_text())
            shards.config.write_text(yaml.safe_dump({**config, "client": {"timeout_s": 1.0, "retries": 1}}))
            # the worker script asserts every worker sees the step's summed dense update after each barrier
            shards.run_workers(WORKERS, ["sync", str(STEPS), str(KEYS), str(BATCH)], mode="sync", timeout_s=900)
            with shards.client() as c:
                c.init_dense("bias", np.ones(8, np.float32))
                bias = c.wait(c.pull_dense("bias"))
        np.testing.assert_array_equal(bias, np.full(8, -sum(range(1, WORKERS + 1)) * STEPS, np.float32))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_a_gone_peer_fails_the_barrier_naming_it_and_a_slow_live_one_does_not(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [ADA]) as shards:
        fast = ClientConfig(timeout_s=0.5, retries=0)
        clients = [PSClient(shards.endpoints, config=fast) for _ in range(3)]
        errors: dict[int, BaseException] = {}

        def at_barrier(rank: int, step: int, peer_timeout: float) -> None:
            try:
                clients[rank].barrier(step, 3, worker=rank, timeout_s=peer_timeout)
            except BaseException as exc:  # reported to the test below
                errors[rank] = exc

        try:
            # step 1: worker 2 comes late (its first poll after the others waited past the request timeout)
            early = [threading.Thread(target=at_barrier, args=(r, 1, 60.0)) for r in (0, 1)]
            for t in early:
                t.start()
            time.sleep(2.0)  # the scenario, not a synchronisation: a peer later than a request may wait
            at_barrier(2, 1, 60.0)
            for t in early:
                t.join(timeout=120)
            assert errors == {}, errors
            # step 2: worker 2 is gone; the others fail naming it once it was silent past the peer timeout
            late = [threading.Thread(target=at_barrier, args=(r, 2, 2.0)) for r in (0, 1)]
            for t in late:
                t.start()
            for t in late:
                t.join(timeout=120)
            assert set(errors) == {0, 1}
            for err in errors.values():
                assert isinstance(err, Unavailable) and "worker 2" in str(err) and "gone" in str(err), err
                assert err.detail["gone"] == [2]
            with shards.client() as c:  # the shards serve on
                assert c.admin.health()
        finally:
            for c in clients:
                c.close()
