"""PSClient's four verbs through real shard processes: push_pull returns the rows its own push
updated, several tickets (thousands) may be in flight, dense arrays follow the same ticket convention."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

from core.errors import InvalidInput, NotFound
from tables.table_config import OptimizerConfig

from .ps_harness import shard_processes

pytestmark = pytest.mark.process

SGD1 = {"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}


def test_push_pull_returns_the_rows_after_its_push(tmp_path: Path) -> None:
    keys = np.array([5, 1, 5, 2**64 - 1, 9], np.uint64)  # a repeated key: its gradients are summed
    grads = np.ones((5, 4), np.float32)
    with shard_processes(tmp_path, [SGD1], n=2) as shards, shards.client() as c:
        rows = c.wait(c.push_pull("emb", keys, grads))
        np.testing.assert_array_equal(rows[:, 0], [-2.0, -1.0, -2.0, -1.0, -1.0])
        np.testing.assert_array_equal(c.wait(c.pull("emb", keys)), rows)


def test_tickets_in_flight_complete_in_any_order(tmp_path: Path) -> None:
    a, b = np.arange(100, dtype=np.uint64), np.arange(50, 150, dtype=np.uint64)
    with shard_processes(tmp_path, [SGD1], n=2) as shards, shards.client() as c:
        push = c.push("emb", a, np.ones((100, 4), np.float32))
        pull = c.pull("emb", b)  # started after the push on the same ordered connections: it sees it
        rows = c.wait(pull)
        assert c.wait(push) is None
        np.testing.assert_array_equal(rows[:, 0], np.where(b < 100, -1.0, 0.0))
        with pytest.raises(InvalidInput, match="uint64"):
            c.pull("emb", b.astype(np.int64))


def test_thousands_of_tickets_in_flight_to_one_shard_are_all_answered_without_a_resend(tmp_path: Path) -> None:
    """More requests in flight than ZeroMQ's default queue (1,000): none is dropped at the send (it
    would wait out its timeout: retries 0 makes that an error here), no reply is dropped at the shard."""
    keys = np.arange(3, dtype=np.uint64)
    with shard_processes(tmp_path, [SGD1], n=1) as shards, shards.client(timeout_s=120, retries=0) as c:
        c.wait(c.push("emb", keys, np.ones((3, 4), np.float32)))
        # a start-up health probe that gave up on a busy machine may have left its reply undeliverable
        before = c.admin.stats()[0]["replies_dropped"]
        for _ in range(3):
            tickets = [c.pull("emb", keys) for _ in range(3_000)]  # sent before any reply is read
            for ticket in tickets:
                np.testing.assert_array_equal(c.wait(ticket)[:, 0], -1.0)
        assert c.admin.stats()[0]["replies_dropped"] == before


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the unclosed socket and context, as meant here
def test_a_client_dropped_without_close_is_freed_at_once_not_left_to_the_cyclic_gc(tmp_path: Path) -> None:
    """No reference cycle holds a client (its admin included): the cyclic GC, run in whatever thread
    allocates, may finalize the zmq context before its sockets and wait in term() forever."""
    keys = np.arange(3, dtype=np.uint64)
    with shard_processes(tmp_path, [SGD1], n=1) as shards:
        gc.disable()
        try:
            dropped = shards.client()
            dropped.wait(dropped.push("emb", keys, np.ones((3, 4), np.float32)))
            dropped.set_placement(dropped.placement)
            assert dropped.admin.health()
            freed = weakref.ref(dropped)
            del dropped
            assert freed() is None
        finally:
            gc.enable()
        with shards.client() as c:  # the shard serves on, the dropped client's push applied once
            np.testing.assert_array_equal(c.wait(c.pull("emb", keys))[:, 0], -1.0)


@pytest.mark.parametrize("n_shards", [1, 2])
def test_a_small_pull_sent_with_its_repeats_reads_what_a_deduplicated_pull_reads(tmp_path: Path,
                                                                                 n_shards: int) -> None:
    rng = np.random.default_rng(5)
    stored = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    with shard_processes(tmp_path, [SGD1], n=n_shards) as shards, shards.client() as c:
        c.wait(c.push("emb", stored, rng.standard_normal((3000, 4)).astype(np.float32)))
        big = rng.choice(stored, 3000)  # repeats; more keys than a small pull takes: deduplicated
        small = np.concatenate([big[:40], big[:40], [np.uint64(12345)]])  # repeats and an absent key
        rows_big = c.wait(c.pull("emb", big))
        rows_small = c.wait(c.pull("emb", small))
        np.testing.assert_array_equal(rows_small[:40], rows_big[:40])
        np.testing.assert_array_equal(rows_small[40:80], rows_big[:40])
        np.testing.assert_array_equal(rows_small[80], 0.0)  # absent: its (zeros) initializer row
        rows_small[:] = 1.0  # the rows are the caller's
        assert c.wait(c.pull("emb", small[:1])).shape == (1, 4)


def test_dense_pull_and_push_are_tickets(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [SGD1], n=2) as shards, shards.client() as c:
        with pytest.raises(NotFound, match="init_dense"):
            c.pull_dense("w")
        c.init_dense("w", np.zeros((2, 3), np.float32))
        c.wait(c.push_dense("w", np.ones((2, 3), np.float32)))
        value = c.wait(c.pull_dense("w"))
        assert value.shape == (2, 3) and np.all(value < 0), "adam (the default) moved every weight down"


def test_a_dense_push_at_an_lr_scale_moves_its_weights_that_much_and_a_bad_scale_is_refused(tmp_path: Path) -> None:
    from ps.protocol import Op

    sgd = OptimizerConfig(kind="sgd", lr=0.5)
    with shard_processes(tmp_path, [SGD1], n=2) as shards, shards.client() as c:
        c.init_dense("w", np.zeros(6, np.float32), optimizer=sgd)
        c.wait(c.push_dense("w", np.ones(6, np.float32), lr_scale=0.25))
        np.testing.assert_allclose(c.wait(c.pull_dense("w")), -0.125)  # lr 0.5 x 0.25
        (part,) = c._dense_layout("w")[1]
        with pytest.raises(InvalidInput, match="lr_scale"):  # sent as it is, past the client's float()
            c._transport.collect([c._transport.request(part.shard, Op.PUSH_DENSE, part.part,
                                                       [np.ones(6, np.float32)], {"lr_scale": "fast"})])
        np.testing.assert_allclose(c.wait(c.pull_dense("w")), -0.125)  # nothing applied; the shard serves on


@pytest.mark.parametrize("n_shards", [1, 2])
def test_unique_keys_pull_and_push_as_the_deduplicating_path_does(tmp_path: Path, n_shards: int) -> None:
    adagrad = {"name": "ada", "dim": 3, "wide": True, "optimizer": {"kind": "adagrad", "lr": 0.1}}
    rng = np.random.default_rng(7)
    keys = rng.permutation(rng.integers(0, 2**64 - 1, 2500, dtype=np.uint64, endpoint=True))
    with shard_processes(tmp_path, [adagrad, {**adagrad, "name": "ref"}], n=n_shards) as shards, \
            shards.client() as c:
        for _ in range(3):  # new ids, then stored ones
            grads = rng.standard_normal((2500, 4)).astype(np.float32)
            shows, clicks = rng.integers(1, 4, 2500).astype(np.float32), rng.integers(0, 2, 2500).astype(np.float32)
            c.wait(c.push("ada", keys, grads, shows=shows, clicks=clicks, unique=True))
            c.wait(c.push("ref", keys, grads, shows=shows, clicks=clicks))
            np.testing.assert_array_equal(c.wait(c.pull("ada", keys, unique=True)), c.wait(c.pull("ref", keys)))
        assert sum(s["tables"]["ada"]["rows"] for s in c.admin.stats()) == 2500
