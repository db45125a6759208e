"""User-history benchmark: /v1/recommend latency for users with a 50-item history
read by the service, and the delay from an event to its appearance in the served history.

Starts ``--shards`` PS shard processes, a two-tower model whose user tower pools a 50-item
``history`` slot (mean), fills a catalogue of ``--items`` items and the histories of ``--users``
users through the trainer's join (trainer.history_join: each user gets more than 50 positives),
exports a bundle (trainer.export), then serves it in-process (no network) and times
``--requests`` recommend calls of random known users, by the user id alone, each way (the ways
take turns request by request, so the machine's load falls on them alike). Timed twice: in the
service's event loop, each request handed straight to the ASGI app as a server hands it over
(the headline: what the service adds), and through Starlette's TestClient, whose every request
also crosses between two threads several times (each crossing a wake-up the loaded machine may
delay: the harness of the first figures). ``--load-procs N`` adds N spinning processes while
requests are timed (a reproducible load on top of whatever else the machine runs).

- live: the service reads the history from the shards (service.read_through + service.user_history);
- bundle: no read-through, the history from the bundle's saves;
- sent (baseline): the client sends the same 50 history ids itself, nothing read by the service.

Delay: ``--markers`` times, a new positive event of a random user goes through the join the
trainers run on each prepared batch (read, point-in-time join, append) and the service's
read-through client polls the user's history until the event's item shows: delay = seen - event
handed to the join. Not included: the Kafka poll and the mini-batch wait before a trainer
prepares the batch (``train.batch_wait_ms``); the bundle path lags by up to a pass.

``/v1/predict`` is timed the same way for one instance (the user and an item): the history read
by the service (it fills each instance's history) against the client sending it.

Target: recommend p99 <= 10 ms with a 50-item history. Prints a table (or ``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient

# run as a script, bench/ comes first on the path and its tables.py would shadow the package
from bench import REPO
from exports.item_catalog import ItemCatalog
from exports.raw_records import RecordHasher
from launcher.launch import free_ports
from logrecords.batch import Batch
from logrecords.schema_config import HistoryConfig, SchemaConfig, SlotConfig, SlotKind
from models import build_model
from models.model_config import ModelConfig
from models.two_tower import as_two_tower
from ps.client import PSClient
from ps.ps_config import PSConfig
from service.app import create_app
from service.settings import ServiceSettings
from tables.id_rows_kernels import ring_unroll
from trainer.export import Exporter
from trainer.history_join import HistoryJoin

LENGTH = 50
USER, ITEM = np.uint64(0 << 56), np.uint64(1 << 56)
MODEL = {"type": "two_tower", "slots": [{"name": "user", "tower": "user"},
                                        {"name": "history", "tower": "user", "pooling": "mean"},
                                        {"name": "item", "tower": "item"}],
         "embedding_dim": 16, "mlp": [64], "tower_dim": 16, "seed": 1, "n_dense": 0}
SCHEMA = SchemaConfig(slots=(SlotConfig(name="user", kind=SlotKind.SPARSE, slot_id=0),
                             SlotConfig(name="item", kind=SlotKind.SPARSE, slot_id=1)),
                      user_id="user", item_id="item", history=HistoryConfig(length=LENGTH))


def _events(users: np.ndarray, items: np.ndarray, times: np.ndarray) -> Batch:
    n = users.shape[0]
    one = np.arange(n + 1, dtype=np.int64)
    return Batch(labels=np.ones(n, np.float32), dense=np.zeros((n, 0), np.float32),
                 slots={"user": (users, one), "item": (items, one)}, event_time=times, user_id=users, item_id=items)


def _start_shards(tmp: Path, model: ModelConfig, n: int) -> tuple[list[subprocess.Popen], list[str]]:
    cfg = tmp / "ps.yaml"
    cfg.write_text(yaml.safe_dump(PSConfig(tables=model.table_configs()).model_dump(mode="json")))
    ports = free_ports(n)
    procs = [subprocess.Popen([sys.executable, "-m", "cli", "shard", "--config", str(cfg), "--index", str(i),
                               "--port", str(p)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True) for i, p in enumerate(ports)]
    return procs, [f"tcp://127.0.0.1:{p}" for p in ports]


def _wait_healthy(client: PSClient, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.admin.health()
            return
        except Exception:  # not up yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def _asgi_post(app: Any, path: str, body: bytes) -> int:
    """One request straight into the ASGI app on the running loop, as a server hands it over:
    no client library, no thread between the caller and the app. The status code."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("bench", 80)}
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status = 0

    async def receive() -> dict[str, Any]:
        return messages.pop() if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


Way = tuple[TestClient, str, list[bytes]]  # a service, the path asked, each request's encoded body


def _in_loop(svc: TestClient, ways: list[Way], extra: Callable[[int], object]) -> list[np.ndarray]:
    """Per way (a service, a path and its encoded request bodies), then ``extra(i)`` (a bare step
    timed the same way), the latency of each call in ms, measured in the service's event loop (``svc``'s).
    The ways take turns request by request, so the machine's load falls on them alike, and the
    turn's first place rotates (after a burst of requests, a blocking wait is woken later)."""
    apps = [(c.app, path, bodies) for c, path, bodies in ways]

    async def timed() -> list[list[float]]:
        for app, path, bodies in apps:  # warm-up: numba, the bundle's history tables, connections
            for body in bodies[:20]:
                assert await _asgi_post(app, path, body) == 200
        n = len(apps) + 1
        out: list[list[float]] = [[] for _ in range(n)]
        for i in range(len(apps[0][2])):
            for w in ((i + j) % n for j in range(n)):  # each in every position of a turn as often
                t0 = time.perf_counter()
                if w < len(apps):
                    assert await _asgi_post(apps[w][0], apps[w][1], apps[w][2][i]) == 200
                else:
                    extra(i)
                out[w].append(time.perf_counter() - t0)
        return out

    return [np.array(o) * 1e3 for o in svc.portal.call(timed)]


def _through_test_client(ways: list[Way]) -> list[np.ndarray]:
    """The same through Starlette's TestClient (the harness of the first figures): each request
    also crosses between the caller's thread and the client's event-loop thread several times."""
    out: list[list[float]] = [[] for _ in ways]
    headers = {"content-type": "application/json"}
    for i in range(len(ways[0][2])):
        for w, (client, path, bodies) in enumerate(ways):
            t0 = time.perf_counter()
            r = client.post(path, content=bodies[i], headers=headers)
            out[w].append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
    return [np.array(o) * 1e3 for o in out]


@contextlib.contextmanager
def _busy_processes(n: int) -> Iterator[None]:
    """``n`` processes spinning on a core each while the requests are timed: a reproducible load."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _stats(ms: np.ndarray) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean())}


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    model = ModelConfig.model_validate(MODEL)
    tmp = Path(tempfile.mkdtemp(prefix="bench-history-"))
    procs, endpoints = _start_shards(tmp, model, args.shards)
    try:
        client = PSClient(endpoints)
        _wait_healthy(client)
        items = np.arange(1, args.items + 1, dtype=np.uint64) | ITEM
        users = np.arange(1, args.users + 1, dtype=np.uint64) | USER
        slots = tuple(s.name for s in as_two_tower(build_model(model)).item_slots)
        ItemCatalog(slots, client=client).observe(_events(items, items, np.zeros(items.shape[0])))
        join = HistoryJoin(SCHEMA, PSClient(endpoints))
        n_events = args.users * (LENGTH + 10)
        ev_users = rng.permutation(np.repeat(users, LENGTH + 10))
        ev_items = rng.choice(items, n_events)
        t0 = time.perf_counter()
        for a in range(0, n_events, args.batch):
            sl = slice(a, a + args.batch)
            times = np.arange(a, min(a + args.batch, n_events), dtype=np.float64)
            join.join(_events(ev_users[sl], ev_items[sl], times))
        join_rate = n_events / (time.perf_counter() - t0)
        exports = tmp / "exports"
        exporter = Exporter(str(exports), PSClient(endpoints), model, base_every=10, schema=SCHEMA)
        exporter.export(1, build_model(model).params.as_dict(), None, ItemCatalog(slots))
        exporter.close()
        asked = rng.choice(users, args.requests)
        rows = client.wait(client.read_id_rows("ids.history", asked, words=1 + 2 * LENGTH)).rows
        hist_ids, _, lengths = ring_unroll(rows)
        assert (lengths == LENGTH).all()
        by_id = [json.dumps({"user": {"slots": {"user": [int(u)]}}, "k": 10}).encode() for u in asked]
        sent = [json.dumps({"user": {"slots": {"user": [int(u)], "history": hist_ids[i].tolist()}}, "k": 10}).encode()
                for i, u in enumerate(asked)]
        # a heavy user's seen items excluded: the item field's own values, or the same items' hashed ids
        excluded = [rng.choice(1 << 40, args.exclude, replace=False).tolist() for _ in asked]
        hasher = RecordHasher(SCHEMA)
        excluded_ids = [hasher.values("item", v, "exclude_values").tolist() for v in excluded]
        excluding_values = [json.dumps({"user": {"slots": {"user": [int(u)]}}, "k": 10, "exclude_values": excluded[i]})
                            .encode() for i, u in enumerate(asked)]
        excluding_ids = [json.dumps({"user": {"slots": {"user": [int(u)]}}, "k": 10, "exclude": excluded_ids[i]})
                         .encode() for i, u in enumerate(asked)]
        items_asked = rng.choice(items, args.requests)  # predict: the user with one item, its history read or sent
        predict_by_id = [json.dumps({"instances": [{"slots": {"user": [int(u)], "item": [int(items_asked[i])]}}]})
                         .encode() for i, u in enumerate(asked)]
        predict_sent = [json.dumps({"instances": [{"slots": {"user": [int(u)], "item": [int(items_asked[i])],
                                                             "history": hist_ids[i].tolist()}}]}).encode()
                        for i, u in enumerate(asked)]
        base = {"exports_dir": str(exports), "admin_token": "bench-token-0123456789", "poll_seconds": 0.2}
        live_settings = ServiceSettings(**base, read_through={"endpoints": endpoints, "timeout_s": 1.0,
                                                              "live_items": False})
        with TestClient(create_app(live_settings)) as live, TestClient(create_app(ServiceSettings(**base))) as bundle:
            _ready(live)
            _ready(bundle)
            reader = _state(live).read_through
            ways: list[Way] = [(live, "/v1/recommend", by_id), (bundle, "/v1/recommend", by_id),
                               (live, "/v1/recommend", sent), (live, "/v1/predict", predict_by_id),
                               (live, "/v1/predict", predict_sent), (live, "/v1/recommend", excluding_values),
                               (live, "/v1/recommend", excluding_ids)]
            with _busy_processes(args.load_procs):
                time.sleep(1.0 if args.load_procs else 0.0)  # let the spinners take their cores
                got = _in_loop(live, ways, lambda i: reader.id_rows("ids.history", asked[i : i + 1], 1 + 2 * LENGTH))
                load = {"in_loop": os.getloadavg()[0]}
                tc = _through_test_client(ways) if args.test_client else []
                load["test_client"] = os.getloadavg()[0]
            names = ("live", "bundle", "sent", "predict_live", "predict_sent", "exclude_values", "exclude_ids")
            results = {k: _stats(v) for k, v in zip((*names, "read"), got, strict=True)}
            results_tc = {k: _stats(v) for k, v in zip(names, tc, strict=True)} if tc else {}
            delays = _delays(live, join, users, rng, args.markers)

            def p50(way: str) -> float:
                return results[way]["p50_ms"]

            reads = _state(live).user_history.status()
        join.close()
        client.close()
        return {"shards": args.shards, "users": args.users, "items": args.items, "history_length": LENGTH,
                "requests": args.requests, "join_events_per_s": join_rate, "recommend": results,
                "recommend_test_client": results_tc,
                "ratio_live_vs_sent_p99": results["live"]["p99_ms"] / results["sent"]["p99_ms"],
                "predict_ratio_live_vs_sent_p99": results["predict_live"]["p99_ms"] / results["predict_sent"]["p99_ms"],
                "exclude": args.exclude,
                "ratio_exclude_values_vs_ids_p50": p50("exclude_values") / p50("exclude_ids"),
                "ratio_exclude_values_vs_none_p50": p50("exclude_values") / p50("live"),
                "target_p99_ms": 10.0, "met": results["live"]["p99_ms"] <= 10.0,
                "delay_ms": {"p50": float(np.percentile(delays, 50)), "p95": float(np.percentile(delays, 95)),
                             "max": float(delays.max())},
                "history_reads": reads, "load_procs": args.load_procs, "load": load}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _state(svc: TestClient) -> Any:
    """The app's state: what the service made at start-up (its readers), for the bench to time them alone."""
    app = svc.app
    assert isinstance(app, FastAPI)
    return app.state


def _ready(svc: TestClient) -> None:
    deadline = time.monotonic() + 60
    while svc.get("/readyz").status_code != 200:
        if time.monotonic() > deadline:
            raise TimeoutError("the service served no bundle")
        time.sleep(0.05)


def _delays(svc: TestClient, join: HistoryJoin, users: np.ndarray, rng: np.random.Generator,
            markers: int) -> np.ndarray:
    """Event handed to the join -> its item in the history the service reads (its read-through client)."""
    reader = _state(svc).read_through
    out = []
    for k in range(markers):
        user = rng.choice(users, 1)
        item = np.array([(1 << 55) + k], np.uint64) | ITEM  # an item no event had
        t0 = time.perf_counter()
        join.join(_events(user, item, np.array([1e9 + k])))
        while True:
            rows = reader.id_rows("ids.history", user, 1 + 2 * LENGTH)
            if rows is not None:
                ids, _, _ = ring_unroll(rows)
                if ids[0, 0] == item[0]:
                    break
        out.append((time.perf_counter() - t0) * 1e3)
    return np.array(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--users", type=int, default=2000)
    p.add_argument("--items", type=int, default=5000)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--markers", type=int, default=50)
    p.add_argument("--exclude", type=int, default=1000, help="items excluded per request in the exclusion rows")
    p.add_argument("--load-procs", type=int, default=0, help="busy processes spinning while requests are timed")
    p.add_argument("--no-test-client", dest="test_client", action="store_false",
                   help="skip the second timing through Starlette's TestClient")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    r = run(args)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    load = r["load"]
    print(f"history bench: {r['shards']} shards, {r['users']} users x {r['history_length']}-item history, "
          f"{r['items']} items, {r['requests']} requests each way; {r['load_procs']} busy processes added, "
          f"load average {load['in_loop']:.1f} (in-loop) / {load['test_client']:.1f} (TestClient)")
    tc = r["recommend_test_client"]
    print(f"{'/v1/recommend (known user)':<42}{'in the service loop':>27}{'via TestClient':>20}")
    print(f"{'':<42}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'p50 ms':>10}{'p99 ms':>10}")
    for key, what in (("live", "history read live from the shards"), ("bundle", "history read from the bundle"),
                      ("sent", "baseline: client sends the 50 ids"), ("read", "  (the live history read alone)"),
                      ("predict_live", "/v1/predict, 1 instance, history read live"),
                      ("predict_sent", "/v1/predict, baseline: client sends the 50"),
                      ("exclude_values", f"recommend, {r['exclude']:,} excluded by value"),
                      ("exclude_ids", f"recommend, {r['exclude']:,} excluded by id")):
        s = r["recommend"][key]
        t = f"{tc[key]['p50_ms']:>10.2f}{tc[key]['p99_ms']:>10.2f}" if key in tc else ""
        print(f"{what:<42}{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}{s['mean_ms']:>9.2f}{t}")
    print(f"p99 live / baseline: {r['ratio_live_vs_sent_p99']:.2f}x; target p99 <= 10 ms (in the service loop): "
          f"{'met' if r['met'] else 'NOT met'}")
    print(f"/v1/predict p99 history read live / sent by the client: {r['predict_ratio_live_vs_sent_p99']:.2f}x")
    print(f"{r['exclude']:,} items excluded by their own values: p50 {r['ratio_exclude_values_vs_ids_p50']:.2f}x the "
          f"same items by hashed id, {r['ratio_exclude_values_vs_none_p50']:.2f}x no exclusion")
    d = r["delay_ms"]
    print(f"event -> served history (join + shard read, no Kafka/batching): p50 {d['p50']:.2f} ms, "
          f"p95 {d['p95']:.2f} ms, max {d['max']:.2f} ms; join {r['join_events_per_s']:,.0f} events/s")
    print(f"history reads of the live service: {r['history_reads']}")


if __name__ == "__main__":
    main()
