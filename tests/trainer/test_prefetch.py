"""The prefetch stage in a thread and in a child process: the same items in the same order,
the producer's error raised in the consumer, the producer's return value kept, and no
process left behind by close(), by a crash of the child or by the death of its parent."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from core.errors import InvalidInput, Unavailable
from launcher.file_job import criteo_model
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import write_dataset
from ps.cluster import ClusterSpec
from trainer.file_worker import prepared_batches
from trainer.prefetch import ProcessPrefetcher, start_prefetch

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]


def counting(n: int, fail_at: int | None = None):
    for i in range(n):
        if i == fail_at:
            raise InvalidInput(f"bad item {i}", detail={"at": i})
        yield {"i": i, "values": np.full(1000, i, np.float32)}
    return {"produced": n}


class Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:  # pickle calls cls(*args) with one arg: fails
        super().__init__(f"{a}/{b}")


def raise_unpicklable():
    yield 1
    raise Unpicklable(1, 2)


def sleeping(seconds: float):
    yield 0
    time.sleep(seconds)  # blocked in the producer: close() has to terminate it
    yield 1


def crashing():
    os._exit(3)  # the child dies without a word (as if killed)
    yield 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_process_gives_the_thread_variants_batches_in_order(tmp_path: Path) -> None:
    data = tmp_path / "train.txt"
    write_dataset(str(data), PlantedModel(seed=2), 3000, fmt="criteo")
    with open(data, "ab") as f:
        f.write(b"1\tnot-a-number\tgarbage\n")  # rejected: counted in the producer's result
    model = criteo_model("wide_deep", embedding_dim=4, mlp=(8,), optimizer="adam", lr=1e-3)
    job = {"model": model.model_dump(mode="json"), "train": [str(data)], "batch_size": 256}
    # sync mode: the producer pulls nothing (no shard needed); worker 1 of 2 takes every other block
    spec = ClusterSpec(role="worker", rank=1, num_workers=2, shard_endpoints=("tcp://127.0.0.1:1",), mode="sync")
    got = {}
    for kind in ("thread", "process"):
        items = start_prefetch(kind, partial(prepared_batches, spec, job))
        try:
            got[kind] = list(items)
        finally:
            items.close()
        got[kind + ".result"] = items.result
    thread, process = got["thread"], got["process"]
    assert len(thread) == len(process) == 6  # 12 blocks of 256 (+1 bad line), worker 1 takes 6
    for a, b in zip(thread, process, strict=True):
        np.testing.assert_array_equal(a.features.labels, b.features.labels)
        np.testing.assert_array_equal(a.features.dense, b.features.dense)
        for t, ta in a.features.tables.items():
            tb = b.features.tables[t]
            for field in ("keys", "idx", "offs", "shows", "clicks"):
                np.testing.assert_array_equal(getattr(ta, field), getattr(tb, field))
        assert b.features.dense.flags.writeable and b.rows is None
    rejected = [got[k + ".result"]["rejected"] for k in ("thread", "process")]
    assert rejected[0] == rejected[1] and sum(rejected[1].values()) == 1
    for kind in ("thread", "process"):  # the stage's CPU by part: every part inside the whole
        cpu = got[kind + ".result"]["cpu_s"]
        assert set(cpu) == {"parse", "features", "pull", "stage"} and min(cpu.values()) >= 0.0
        assert cpu["parse"] + cpu["features"] + cpu["pull"] <= cpu["stage"] + 1e-3 and cpu["pull"] < 1e-3


def test_process_keeps_order_result_and_raises_the_producers_error() -> None:
    items = ProcessPrefetcher(partial(counting, 50))
    try:
        seen = [(x["i"], float(x["values"][-1])) for x in items]
    finally:
        items.close()
    assert seen == [(i, float(i)) for i in range(50)]
    assert items.result == {"produced": 50} and items.stats["peak_rss_mb"] > 0
    with pytest.raises(StopIteration):
        next(items)

    items = ProcessPrefetcher(partial(counting, 10, fail_at=4))
    try:
        assert [next(items)["i"] for _ in range(4)] == [0, 1, 2, 3]
        with pytest.raises(InvalidInput, match="bad item 4") as err:
            next(items)
        assert err.value.detail == {"at": 4}
    finally:
        items.close()

    items = ProcessPrefetcher(raise_unpicklable)
    try:
        assert next(items) == 1
        with pytest.raises(Unavailable, match="Unpicklable"):
            next(items)
    finally:
        items.close()


def test_close_leaves_no_process_whatever_the_child_is_doing() -> None:
    waiting = ProcessPrefetcher(partial(counting, 1000), depth=2)  # blocked: no credit for a third item
    assert next(waiting)["i"] == 0
    blocked = ProcessPrefetcher(partial(sleeping, 600))  # blocked inside the producer
    assert next(blocked) == 0
    pids = [waiting.pid, blocked.pid]
    dirs = [waiting._dir, blocked._dir]
    waiting.close()
    blocked.close()
    assert all(pid is not None and not alive(pid) for pid in pids)
    assert not any(Path(d).exists() for d in dirs)

    crashed = ProcessPrefetcher(crashing)
    try:
        with pytest.raises(Unavailable, match="code 3"):
            next(crashed)
    finally:
        crashed.close()


def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    script = ("import sys, time\nfrom functools import partial\nfrom trainer.prefetch import ProcessPrefetcher\n"
              "from tests.trainer.test_prefetch import counting\n"
              "p = ProcessPrefetcher(partial(counting, 1000))\nnext(p)\nprint(p.pid, flush=True)\ntime.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert alive(child)
    finally:
        parent.kill()
        parent.wait()
    assert wait_gone(child)
