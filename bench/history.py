"""User-history benchmark (#11 point 2): /v1/recommend latency for users with a 50-item history
read by the service, and the delay from an event to its appearance in the served history.

Starts ``--shards`` PS shard processes, a two-tower model whose user tower pools a 50-item
``history`` slot (mean), fills a catalogue of ``--items`` items and the histories of ``--users``
users through the trainer's join (trainer.history_join: each user gets more than 50 positives),
exports a bundle (trainer.export), then serves it in-process (FastAPI's TestClient, no network)
and times ``--requests`` recommend calls of random known users, by the user id alone, each way
(the ways take turns request by request, so the machine's load falls on them alike):

- live: the service reads the history from the shards (service.read_through + service.user_history);
- bundle: no read-through, the history from the bundle's saves;
- sent (baseline): the client sends the same 50 history ids itself, nothing read by the service.

Delay: ``--markers`` times, a new positive event of a random user goes through the join the
trainers run on each prepared batch (read, point-in-time join, append) and the service's
read-through client polls the user's history until the event's item shows: delay = seen - event
handed to the join. Not included: the Kafka poll and the mini-batch wait before a trainer
prepares the batch (``train.batch_wait_ms``); the bundle path lags by up to a pass.

Target: recommend p99 <= 10 ms with a 50-item history. Prints a table (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from fastapi.testclient import TestClient

from exports.item_catalog import ItemCatalog
from models import build_model
from models.model_config import ModelConfig
from ps.client import PSClient
from ps.launcher import free_ports
from ps.ps_config import PSConfig
from service.app import create_app
from service.settings import ServiceSettings
from streaming.batch import Batch
from streaming.stream_config import HistoryConfig, SchemaConfig, SlotConfig, SlotKind
from tables.id_rows_kernels import ring_unroll
from trainer.export import Exporter
from trainer.history_join import HistoryJoin

REPO = Path(__file__).resolve().parents[1]
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
    procs = [subprocess.Popen([sys.executable, "-m", "deploy.cli", "shard", "--config", str(cfg), "--index", str(i),
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


def _latencies(ways: list[tuple[TestClient, list[dict[str, Any]]]]) -> list[np.ndarray]:
    """Per way (a service and its request bodies), the latency of each request in ms. The ways
    take turns request by request, so the machine's load falls on them alike."""
    for client, bodies in ways:  # warm-up: numba, the bundle's history tables, connections
        for body in bodies[:20]:
            assert client.post("/v1/recommend", json=body).status_code == 200
    out: list[list[float]] = [[] for _ in ways]
    for i in range(len(ways[0][1])):
        for w, (client, bodies) in enumerate(ways):
            t0 = time.perf_counter()
            r = client.post("/v1/recommend", json=bodies[i])
            out[w].append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
    return [np.array(o) * 1e3 for o in out]


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
        slots = tuple(s.name for s in build_model(model).item_slots)  # type: ignore[attr-defined]
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
        by_id = [{"user": {"slots": {"user": [int(u)]}}, "k": 10} for u in asked]
        sent = [{"user": {"slots": {"user": [int(u)], "history": hist_ids[i].tolist()}}, "k": 10}
                for i, u in enumerate(asked)]
        base = {"exports_dir": str(exports), "admin_token": "bench-token-0123456789", "poll_seconds": 0.2}
        live_settings = ServiceSettings(**base, read_through={"endpoints": endpoints, "timeout_s": 1.0,
                                                              "live_items": False})
        with TestClient(create_app(live_settings)) as live, TestClient(create_app(ServiceSettings(**base))) as bundle:
            _ready(live)
            _ready(bundle)
            got = _latencies([(live, by_id), (bundle, by_id), (live, sent)])
            results = {k: _stats(v) for k, v in zip(("live", "bundle", "sent"), got, strict=True)}
            delays = _delays(live, join, users, rng, args.markers)
        join.close()
        client.close()
        return {"shards": args.shards, "users": args.users, "items": args.items, "history_length": LENGTH,
                "requests": args.requests, "join_events_per_s": join_rate, "recommend": results,
                "ratio_live_vs_sent_p99": results["live"]["p99_ms"] / results["sent"]["p99_ms"],
                "target_p99_ms": 10.0, "met": results["live"]["p99_ms"] <= 10.0,
                "delay_ms": {"p50": float(np.percentile(delays, 50)), "p95": float(np.percentile(delays, 95)),
                             "max": float(delays.max())},
                "load": os.getloadavg()}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _ready(svc: TestClient) -> None:
    deadline = time.monotonic() + 60
    while svc.get("/readyz").status_code != 200:
        if time.monotonic() > deadline:
            raise TimeoutError("the service served no bundle")
        time.sleep(0.05)


def _delays(svc: TestClient, join: HistoryJoin, users: np.ndarray, rng: np.random.Generator,
            markers: int) -> np.ndarray:
    """Event handed to the join -> its item in the history the service reads (its read-through client)."""
    reader = svc.app.state.read_through  # type: ignore[attr-defined]
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    r = run(args)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(f"history bench: {r['shards']} shards, {r['users']} users x {r['history_length']}-item history, "
          f"{r['items']} items, {r['requests']} requests each way, load {r['load'][0]:.1f}")
    print(f"{'/v1/recommend (known user)':<42}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
    for key, what in (("live", "history read live from the shards"), ("bundle", "history read from the bundle"),
                      ("sent", "baseline: client sends the 50 ids")):
        s = r["recommend"][key]
        print(f"{what:<42}{s['p50_ms']:>9.2f}{s['p99_ms']:>9.2f}{s['mean_ms']:>9.2f}")
    print(f"p99 live / baseline: {r['ratio_live_vs_sent_p99']:.2f}x; target p99 <= 10 ms: "
          f"{'met' if r['met'] else 'NOT met'}")
    d = r["delay_ms"]
    print(f"event -> served history (join + shard read, no Kafka/batching): p50 {d['p50']:.2f} ms, "
          f"p95 {d['p95']:.2f} ms, max {d['max']:.2f} ms; join {r['join_events_per_s']:,.0f} events/s")


if __name__ == "__main__":
    main()
