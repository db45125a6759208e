"""The building blocks of bench/chaos.py: a pass whose records grew by more (less) than its
offsets advanced double-counted (lost) the difference; a manifest that fails verification is
corrupt, one pruned before it was read is not; service failures inside an excused window
(no bundle yet, a service restart) do not count against the error rate; the fault tools: each fault once with
foreign records after every restart of `up`, a ballast that fills a real tmpfs to ENOSPC and frees
it, idle connections held and opened again when the server closes them."""

from __future__ import annotations

import contextlib
import errno
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.chaos_parts import (
    Ballast,
    IdleConnections,
    PassWatcher,
    Probe,
    auc_comparison,
    fault_plan,
    free_bytes,
    mount_tmpfs,
    oversized_line,
    service_errors,
    unmount,
)
from core.atomic_files import write_json
from trainer import checkpoints


def commit(root: Path, pass_id: int, records_total: int, offsets: dict[str, int], *, names: int | None = None) -> None:
    d = checkpoints.pass_dir(root, pass_id)
    d.mkdir(parents=True)
    write_json(d / checkpoints.MANIFEST, {"pass": names or pass_id, "files": {}, "created_at": float(pass_id),
                                                 "records_total": records_total, "offsets": offsets,
                                                 "progress": {"auc_total": 0.6}})


def test_records_against_offsets_pass_by_pass_and_corrupt_manifests(tmp_path: Path) -> None:
    watcher = PassWatcher(tmp_path)
    commit(tmp_path, 1, 100, {"0": 60, "1": 40})
    watcher.poll()
    commit(tmp_path, 2, 250, {"0": 120, "1": 80})  # 150 counted for 100 consumed: 50 twice
    commit(tmp_path, 3, 400, {"0": 200, "1": 200})  # 150 counted for 200 consumed: 50 lost
    commit(tmp_path, 4, 400, {"0": 200, "1": 200}, names=9)  # the manifest names another pass
    watcher.poll()
    assert (watcher.duplicates, watcher.losses) == (50, 50)
    assert watcher.verified == 3 and len(watcher.corrupt) == 1 and "pass 4" in watcher.corrupt[0]
    assert watcher.newest is not None and (watcher.newest.records_total, watcher.newest.consumed) == (400, 400)


def test_service_failures_are_excused_only_inside_the_windows() -> None:
    probes = [Probe(1.0, "/readyz", 503), Probe(2.0, "/readyz", 200), Probe(3.0, "/v1/embeddings:lookup", 200),
              Probe(4.0, "/readyz", 0), Probe(5.0, "/readyz", 200), Probe(6.0, "/v1/embeddings:lookup", 500),
              Probe(7.0, "/v1/embeddings:lookup", 422)]
    got = service_errors(probes, excused=[(0.0, 2.0), (4.0, 5.0)])
    assert got["requests"] == 7 and got["requests_outside_restarts"] == 3
    assert got["errors_outside_restarts"] == 1 and got["errors_during_restarts"] == 2
    assert got["client_errors_4xx"] == 1


def test_the_chaos_auc_is_compared_with_the_mean_of_the_no_kill_runs() -> None:
    one = auc_comparison(0.61, [0.6])
    assert one["difference"] == 0.01 and one["no_kills_spread"] is None and one["no_kills_mean"] == 0.6
    two = auc_comparison(0.6, [0.59, 0.63, None])
    assert two["no_kills_mean"] == 0.61 and two["no_kills_spread"] == 0.04 and two["difference"] == -0.01
    assert auc_comparison(None, [0.6])["difference"] is None and auc_comparison(0.6, [None])["difference"] is None


def test_the_fault_plan_has_each_fault_once_and_foreign_records_after_every_restart_of_up() -> None:
    faults = ["shard", "broker", "future_timestamps", "up", "disk_full", "idle_connections"]
    for seed in range(50):
        plan = fault_plan(faults, random.Random(seed))
        assert sorted(plan) == sorted(faults)
        assert plan.index("future_timestamps") > max(plan.index("broker"), plan.index("up"))
    assert fault_plan(["future_timestamps", "shard"], random.Random(1)) in (["future_timestamps", "shard"],
                                                                             ["shard", "future_timestamps"])


def test_the_ballast_fills_a_real_tmpfs_to_enospc_and_frees_it(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    assert mount_tmpfs(mnt, 4) is None, "mounting a tmpfs needs root"
    try:
        ballast = Ballast(mnt)
        assert ballast.fill() > 3 << 20
        assert free_bytes(mnt) == 0
        with pytest.raises(OSError) as err:
            (mnt / "other").write_bytes(b"x" * 8192)
        assert err.value.errno == errno.ENOSPC
        ballast.free()
        assert free_bytes(mnt) > 3 << 20
        (mnt / "other").write_bytes(b"x" * 8192)
    finally:
        unmount(mnt)


def test_idle_connections_are_held_and_opened_again_when_the_server_closes_them() -> None:
    server = socket.create_server(("127.0.0.1", 0), backlog=256)
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    idle = IdleConnections("127.0.0.1", server.getsockname()[1], 50).start()
    try:
        wait_for(lambda: len(accepted) >= 50 and idle.held == 50)
        for conn in accepted[:10]:  # the server gives up on ten of them
            conn.close()
        wait_for(lambda: idle.closed_by_server == 10 and idle.held == 50 and idle.opened == 60)
    finally:
        idle.stop()
        server.close()
        for conn in accepted:
            conn.close()
    assert idle.held == 0 and idle.connect_failures == 0 and idle.most_held == 50


def test_the_oversized_line_is_one_json_object_over_the_limit() -> None:
    line = oversized_line(1 << 20)
    assert len(line) > 1 << 20 and line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["label"] == 0


def wait_for(cond: Callable[[], bool], deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.05)
