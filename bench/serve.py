"""Serving benchmark: the streamrec service (one uvicorn worker, loopback) beside a bare
FastAPI endpoint returning a constant (the framework's ceiling), in the same run.

Builds a real bundle first: --rows embedding rows (dim --dim, --shards shards) and --items item
vectors, served with the --index Faiss index. Load comes from separate processes
(bench/http_load.py: raw asyncio keep-alive connections, closed loop). Rates are measured
with --concurrency connections, latencies (p99) with --latency-concurrency connections.
Then a delta of --delta rows (and as many item vectors) is published while single lookups
run: its apply time and the p99 during it.
With ``--live-rate N`` the service also reads through to two live shard processes (and runs
the live item path, service.live_items; the bundle then carries a schema and item ids of its
item slot) and the p99 runs are repeated while a pusher changes N rows a second on the shards
(9 in 10 user rows, 1 in 10 item rows, some of them new items), against this service and
against a second one on the same bundle without the live path (the pass-bundle path), taking
turns (--rounds each, medians): the ratio is what the live path costs serving while updates
flow (the pushes load the machine for both).
Run: ``python -m bench.serve [--items 1000000] [--rows 10000000] [--live-rate 20000] [--json]``
(with --json the table goes to stderr and stdout holds one JSON object).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import REPO
from core.ports import free_ports

TOKEN = "bench-admin-token-0b9e"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    return free_ports(1)[0]


# ----------------------------------------------------------------------------- the bundle
class Exporter:
    """The trainer's side: real tables saved as export bundles (exports.bundle format)."""

    def __init__(self, root: Path, rows: int, dim: int, shards: int, schema: dict[str, Any] | None = None) -> None:
        from models import build_model
        from models.model_config import ModelConfig
        from tables.sparse_table import SparseTable

        self.root, self.shards, self.rows, self.schema = root, shards, rows, schema
        self.model = ModelConfig.model_validate({
            "type": "two_tower", "n_dense": 0, "mlp": [64], "tower_dim": dim, "embedding_dim": dim,
            "slots": [{"name": "user", "tower": "user"}, {"name": "item", "tower": "item"}]})
        (cfg,) = self.model.table_configs()
        cfg = cfg.model_copy(update={"initial_capacity": max(1024, rows // shards + rows // 8)})
        self.config = cfg
        self.tables = [SparseTable(cfg) for _ in range(shards)]
        self.dense = build_model(self.model).params.as_dict()
        self.version = 0

    def push(self, keys: np.ndarray, grads: np.ndarray) -> None:
        from ps.routing import shard_of

        where = shard_of(keys, self.shards)
        for i, t in enumerate(self.tables):
            sel = where == i
            t.push(keys[sel], grads[sel])

    def pull(self, keys: np.ndarray) -> np.ndarray:
        """Rows of ``keys`` (created at their initializer rows when new, as the shards create them)."""
        from ps.routing import shard_of

        out = np.empty((keys.shape[0], self.tables[0].width), np.float32)
        where = shard_of(keys, self.shards)
        for i, t in enumerate(self.tables):
            sel = np.flatnonzero(where == i)
            out[sel] = t.pull(keys[sel])
        return out

    def item_vectors(self, item_ids: np.ndarray) -> np.ndarray:
        """The model's item tower over the items' rows: what an exporter writes, and what the live
        path computes from the shards' rows of the same items."""
        from exports.predictor import Predictor
        from logrecords.batch import Batch

        n = item_ids.shape[0]
        batch = Batch(labels=np.zeros(n, np.float32), dense=np.zeros((n, 0), np.float32),
                      slots={"item": (item_ids, np.arange(n + 1, dtype=np.int64))}, item_id=item_ids)
        return Predictor(self.model.model_dump(mode="json"), self.dense, lambda t, k: self.pull(k)).item_vectors(batch)

    def export(self, kind: str, items: tuple[np.ndarray, np.ndarray], items_full: bool) -> None:
        from exports.bundle import publish, staging_dir, table_dir

        self.version += 1
        stage = staging_dir(self.root, self.version)
        for i, t in enumerate(self.tables):
            t.save(table_dir(stage / f"shard-{i}", t.name), mode=kind, cursor="export")
        publish(self.root, version=self.version, kind=kind, parent_version=None if kind == "base" else self.version - 1,
                pass_id=self.version, num_shards=self.shards, tables=[self.tables[0].name],
                model=self.model.model_dump(mode="json"), dense=self.dense, items=items, items_full=items_full,
                newest_record_time=time.time(), schema=self.schema)


# the live runs' schema: users keep slot 0 (ids 1..rows), items get slot 2 (what the live path follows)
LIVE_SCHEMA = {"format": "json", "label": "label", "user_id": "user", "item_id": "item",
               "slots": [{"name": "user", "kind": "sparse", "hash": "int", "slot_id": 0},
                         {"name": "item", "kind": "sparse", "hash": "int", "slot_id": 2}]}
ITEM_SLOT = np.uint64(2 << 56)


def build_base(ex: Exporter, n_items: int, dim: int, rng: np.random.Generator, *, item_slot: bool = False
               ) -> np.ndarray:
    chunk = 1 << 20
    for a in range(0, ex.rows, chunk):
        keys = np.arange(a + 1, min(a + chunk, ex.rows) + 1, dtype=np.uint64)
        ex.push(keys, rng.standard_normal((keys.shape[0], ex.tables[0].width), dtype=np.float32) * 0.01)
    item_ids = np.unique(rng.integers(0, np.iinfo(np.uint64).max, n_items, dtype=np.uint64, endpoint=True))
    if item_slot:  # ids of the schema's item slot
        item_ids = np.unique((item_ids & np.uint64((1 << 56) - 1)) | ITEM_SLOT)
        # the item tower's vectors, as the live path computes them: random vectors here would sit
        # in other IVF lists than the live ones, and the lists the refreshed items crowd into
        # would make the live service's searches slower for a reason no real job has
        vectors = ex.item_vectors(item_ids)
    else:
        vectors = rng.standard_normal((item_ids.shape[0], dim), dtype=np.float32)
    ex.export("base", (item_ids, vectors), items_full=True)
    return item_ids


# ---------------------------------------------------------------------------- processes
def start(cmd: list[str], port: int, ready_path: str, timeout: float, env: dict[str, str] | None = None
          ) -> subprocess.Popen:
    import httpx

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[:4]} exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            r = httpx.get(f"http://127.0.0.1:{port}{ready_path}", timeout=2)
            if r.status_code == 200:
                return proc
            rejected = r.json().get("error", {}).get("detail", {}).get("last_error")
            if rejected:
                proc.kill()
                raise RuntimeError(f"the service rejected the bundle: {rejected}")
        except (httpx.TransportError, ValueError):
            pass
        time.sleep(0.25)
    proc.kill()
    raise RuntimeError(f"{cmd[:4]} not ready after {timeout}s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def load(port: int, requests: list[list[Any]], concurrency: int, duration: float, warmup: float = 1.0,
         background: bool = False, raw: bool = False) -> Any:
    spec = {"host": "127.0.0.1", "port": port, "concurrency": concurrency, "duration": duration, "warmup": warmup,
            "requests": requests, "raw": raw}
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    proc = subprocess.Popen([sys.executable, "-m", "bench.http_load", path], stdout=subprocess.PIPE, cwd=REPO)
    if background:
        return proc
    return collect(proc)


def collect(proc: subprocess.Popen) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=600)
    res = json.loads(out)
    bad = {k: v for k, v in res["statuses"].items() if k != "200"}
    if bad:
        log(f"non-200 answers: {bad}")
    return res


def bare_server(port: int) -> None:
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/bare")
    async def bare() -> dict[str, bool]:
        return {"ok": True}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, workers=1)


# ------------------------------------------------------------------------ the live shards
def start_shards(work: Path, config: Any, n: int) -> tuple[list[subprocess.Popen], list[str]]:
    """``n`` shard processes serving the bundle's table (empty: the pusher fills them)."""
    from ps.client import PSClient
    from ps.ps_config import ClientConfig

    ps_yaml = work / "ps.yaml"
    ps_yaml.write_text(json.dumps({"tables": [config.model_dump(mode="json")]}))
    ports = [free_port() for _ in range(n)]
    procs = [subprocess.Popen([sys.executable, "-m", "cli", "shard", "--config", str(ps_yaml), "--index",
                               str(i), "--port", str(p)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i, p in enumerate(ports)]
    endpoints = [f"tcp://127.0.0.1:{p}" for p in ports]
    with PSClient(endpoints, config=ClientConfig(timeout_s=60, retries=0)) as client:
        client.admin.stats()  # waits until every shard answers
    return procs, endpoints


class Pusher:
    """Changes ``rate`` rows a second on the shards from a thread: 9 in 10 user rows, 1 in 10 item
    rows (a tenth of those new items), every 50 ms."""

    def __init__(self, endpoints: list[str], table: str, width: int, rate: float, rows: int,
                 item_ids: np.ndarray) -> None:
        import threading

        self.endpoints, self.table, self.width, self.rate = endpoints, table, width, rate
        self.rows, self.item_ids = rows, item_ids
        self.pushed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Pusher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from ps.client import PSClient

        rng = np.random.default_rng(5)
        n = max(10, int(self.rate * 0.05))
        n_items = n // 10
        with PSClient(self.endpoints) as client:
            start = time.monotonic()
            k = 0
            while not self._stop.is_set():
                new = (rng.integers(0, 1 << 56, n_items // 10, dtype=np.uint64) | ITEM_SLOT)
                keys = np.concatenate([rng.integers(1, self.rows + 1, n - n_items).astype(np.uint64),
                                       rng.choice(self.item_ids, n_items - new.shape[0]), new])
                grads = rng.standard_normal((keys.shape[0], self.width), dtype=np.float32) * 0.01
                client.wait(client.push(self.table, keys, grads))
                self.pushed += keys.shape[0]
                k += 1
                self._stop.wait(max(0.0, start + k * 0.05 - time.monotonic()))


# --------------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--index", choices=("flat", "ivf", "hnsw"), default="ivf")
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--nprobe", type=int, default=16)
    ap.add_argument("--delta", type=int, default=100_000)
    ap.add_argument("--delta-window", type=float, default=20.0, help="seconds of load around the delta apply")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds measured per scenario")
    ap.add_argument("--concurrency", type=int, default=32, help="connections for the rate runs")
    ap.add_argument("--rounds", type=int, default=3, help="alternating bare/lookup rate rounds (median kept)")
    ap.add_argument("--latency-concurrency", type=int, default=4, help="connections for the p99 runs")
    ap.add_argument("--workdir", help="where the bundles go (default: a temp dir, removed)")
    ap.add_argument("--live-rate", type=float, default=0.0,
                    help="rows/s changed on live shards the service reads through to (0: no live path)")
    ap.add_argument("--live-interval", type=float, default=0.1, help="the live item refresh's read interval (s)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--bare-server", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare_server:
        bare_server(args.bare_server)
        return 0
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-serve-"))
    exports = work / "exports"
    procs: list[subprocess.Popen] = []
    try:
        return run(args, work, exports, procs)
    finally:
        for p in procs:
            stop(p)
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path, exports: Path, procs: list[subprocess.Popen]) -> int:
    import httpx

    rng = np.random.default_rng(0)
    loadavg_start = os.getloadavg()[0]  # the machine is shared: say how busy it was
    t0 = time.perf_counter()
    live = args.live_rate > 0
    ex = Exporter(exports, args.rows, args.dim, args.shards, schema=LIVE_SCHEMA if live else None)
    item_ids = build_base(ex, args.items, args.dim, rng, item_slot=live)
    log(f"base bundle: {args.rows} rows, {item_ids.shape[0]} items in {time.perf_counter() - t0:.1f}s")
    cfg = work / "service.yaml"
    service_cfg: dict[str, Any] = {"exports_dir": str(exports), "poll_seconds": 0.1,
                                   "index": {"kind": args.index, "nlist": args.nlist, "nprobe": args.nprobe}}
    endpoints: list[str] = []
    base_port = free_port()
    if live:
        shard_procs, endpoints = start_shards(work, ex.config, 2)
        procs.extend(shard_procs)
        base_cfg = work / "service-pass-bundle.yaml"
        base_cfg.write_text(json.dumps(service_cfg))
        procs.append(start([sys.executable, "-m", "cli", "serve", "--config", str(base_cfg), "--port",
                            str(base_port), "--log-level", "warning"], base_port, "/readyz", 3600,
                           env={**os.environ, "STREAMREC_ADMIN_TOKEN": TOKEN}))
        wait_settled(base_port)
        service_cfg["read_through"] = {"endpoints": endpoints, "items_interval_s": args.live_interval}
    cfg.write_text(json.dumps(service_cfg))
    port, bare_port = free_port(), free_port()
    t0 = time.perf_counter()
    service_proc = start([sys.executable, "-m", "cli", "serve", "--config", str(cfg), "--port", str(port),
                          "--log-level", "warning"], port, "/readyz", 3600,
                         env={**os.environ, "STREAMREC_ADMIN_TOKEN": TOKEN})
    procs.append(service_proc)
    log(f"service ready in {time.perf_counter() - t0:.1f}s")
    wait_settled(port)  # the first bundle also loads into the standby side, after /readyz
    log(f"both store sides loaded after {time.perf_counter() - t0:.1f}s")
    procs.append(start([sys.executable, "-m", "bench.serve", "--bare-server", str(bare_port)], bare_port, "/bare", 120))

    n_req = 4096
    users = rng.integers(1, args.rows + 1, (n_req, 1000))
    items = rng.choice(item_ids, n_req)
    single = [["GET", f"/v1/embeddings/user/{int(u)}", None] for u in users[:, 0]]
    batch = [["POST", "/v1/embeddings:lookup", {"slot": "user", "ids": u.tolist()}] for u in users[:256]]
    similar = [["GET", f"/v1/items/{int(i)}/similar?k=10", None] for i in items]
    rec = [["POST", "/v1/recommend", {"user": {"slots": {"user": u[:3].tolist()}}, "k": 10}] for u in users]
    bare = [["GET", "/bare", None]]
    c, lc, d = args.concurrency, args.latency_concurrency, args.duration
    res: dict[str, dict[str, Any]] = {}
    # the machine is shared: alternate bare and lookup rounds and keep each one's median
    rounds: dict[str, list[float]] = {"bare_rate": [], "lookup_rate": []}
    for _ in range(args.rounds):
        for name, p, reqs in (("bare_rate", bare_port, bare), ("lookup_rate", port, single)):
            rounds[name].append(load(p, reqs, c, d)["rps"])
            log(f"{name}: {rounds[name][-1]:.0f} req/s")
    for name, rates in rounds.items():
        res[name] = {"rps": float(np.median(rates)), "rounds": rates}
    for name, p, reqs in (("bare_lat", bare_port, bare), ("lookup_lat", port, single), ("batch1000", port, batch),
                          ("similar", port, similar), ("recommend", port, rec)):
        res[name] = load(p, reqs, lc, d)
        log(f"{name}: p99 {res[name]['p99_ms']:.2f} ms")

    live_res: dict[str, Any] = {}
    if live:  # the same p99 runs while the pusher changes rows on the shards
        with Pusher(endpoints, ex.config.name, ex.config.width, args.live_rate, args.rows, item_ids) as pusher:
            time.sleep(2.0)
            # bundles keep coming while training runs (a pass every few seconds): two small deltas,
            # served by both services, after which the live path's row overlay answers (service.live_rows)
            for _ in range(2):
                keys = rng.choice(args.rows, 1000, replace=False).astype(np.uint64) + np.uint64(1)
                ex.push(keys, rng.standard_normal((keys.shape[0], ex.tables[0].width), dtype=np.float32) * 0.01)
                moved = rng.choice(item_ids, 100, replace=False)  # trained items: new rows, new tower vectors
                ex.push(moved, rng.standard_normal((moved.shape[0], ex.tables[0].width), dtype=np.float32) * 0.01)
                ex.export("delta", (moved, ex.item_vectors(moved)), items_full=False)
                for p in (port, base_port):
                    wait_version(p, ex.version)
            answered = wait_answered(port)
            log(f"pass bundles while live: version {ex.version}; row overlay answers for {answered}")
            t_live = time.monotonic()
            p99s: dict[str, list[float]] = {}
            for r in range(args.rounds):  # taking turns, medians kept: the machine is shared
                for name, reqs in (("lookup_lat", single), ("similar", similar), ("recommend", rec)):
                    turns = [(name, port), ("base_" + name, base_port)]
                    for key, p in turns[:: 1 if r % 2 == 0 else -1]:  # who goes first alternates
                        p99s.setdefault(key, []).append(load(p, reqs, lc, d)["p99_ms"])
                    log(f"{name} while live updates flow: p99 {p99s[name][-1]:.2f} ms live path, "
                        f"{p99s['base_' + name][-1]:.2f} ms pass-bundle path")
            live_res |= {k: {"p99_ms": float(np.median(v)), "rounds": v} for k, v in p99s.items()}
            pushed_rate = pusher.pushed / (time.monotonic() - t_live + 2.0)
        status = httpx.get(f"http://127.0.0.1:{port}/admin/status", headers={"Authorization": f"Bearer {TOKEN}"},
                           timeout=10).json()["live"]
        live_res["status"] = status
        live_res["pushed_rate"] = pushed_rate
        log(f"live path: {status}")
    log_server_side(port)
    rss_gib = rss_of(service_proc.pid) / 2**30
    # a delta of --delta changed rows (and as many item vectors) published while single lookups run
    keys = rng.choice(args.rows, args.delta, replace=False).astype(np.uint64) + np.uint64(1)
    ex.push(keys, rng.standard_normal((keys.shape[0], ex.tables[0].width), dtype=np.float32) * 0.01)
    moved = rng.choice(item_ids, min(args.delta, item_ids.shape[0]), replace=False)
    bg = load(port, single, lc, args.delta_window, warmup=0.5, background=True, raw=True)
    time.sleep(1.5)
    t_pub = time.time()
    ex.export("delta", (moved, rng.standard_normal((moved.shape[0], args.dim), dtype=np.float32)), items_full=False)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        while client.get("/readyz").json().get("version") != ex.version:
            time.sleep(0.02)
        t_vis = time.time()
        hist = client.get("/admin/status", headers={"Authorization": f"Bearer {TOKEN}"}).json()["bundle"]["history"]
    apply_s = hist[-1]["apply_seconds"]
    bg_res = collect(bg)
    # the window: from publishing until the second side also took the delta (about one more apply)
    t_done = t_vis + apply_s
    if t_done > bg_res["raw"][-1][0]:
        log(f"warning: the load window ended before the apply did; raise --delta-window (>{t_done - t_pub:.0f}s)")
    during = np.array([x for t, x in bg_res["raw"] if t_pub <= t <= t_done])
    out = {
        "lookup_rps": round(res["lookup_rate"]["rps"], 1), "bare_rps": round(res["bare_rate"]["rps"], 1),
        "lookup_p99_ms": round(res["lookup_lat"]["p99_ms"], 3),
        "batch1000_p99_ms": round(res["batch1000"]["p99_ms"], 3),
        "similar_p99_ms": round(res["similar"]["p99_ms"], 3), "recommend_p99_ms": round(res["recommend"]["p99_ms"], 3),
        "delta_apply_s": round(apply_s, 3),
        "p99_during_apply_ms": round(float(np.percentile(during, 99)), 3) if during.size else None,
    }
    extra = {"rows": args.rows, "items": int(item_ids.shape[0]), "dim": args.dim, "shards": args.shards,
             "index": args.index, "concurrency": c, "delta_rows": args.delta, "latency_concurrency": lc,
             "duration_s": d, "rounds": args.rounds, "loadavg_start": loadavg_start, "loadavg_end": os.getloadavg()[0],
             "bare_p99_ms": round(res["bare_lat"]["p99_ms"], 3), "lookup_p50_ms": round(res["lookup_lat"]["p50_ms"], 3),
             "delta_visible_s": round(t_vis - t_pub, 3), "service_rss_gib": round(rss_gib, 2),
             "during_apply_requests": int(during.size)}
    if live:
        st = live_res["status"]
        for k in ("lookup_lat", "similar", "recommend"):
            out[f"live_{k}_p99_ms"] = round(live_res[k]["p99_ms"], 3)
            out[f"pushes_{k}_p99_ms"] = round(live_res["base_" + k]["p99_ms"], 3)
            # each round's live / pass-bundle ratio: their spread is the noise the median sits in
            pairs = zip(live_res[k]["rounds"], live_res["base_" + k]["rounds"], strict=True)
            out[f"live_{k}_round_ratios"] = [round(a / b, 3) for a, b in pairs]
        extra |= {"live_rate": args.live_rate, "live_pushed_rate": round(live_res["pushed_rate"], 1),
                  "live_items_refreshed": st["items_refreshed"], "live_items_added": st["items_added"],
                  "live_item_freshness_p50_s": st["item_freshness_p50_s"],
                  "live_item_freshness_p95_s": st["item_freshness_p95_s"], "live_rows": st.get("rows")}
    print_table(out, extra, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))
    return 0


def wait_version(port: int, version: int, timeout: float = 600) -> None:
    """Until the service serves ``version`` on both store sides."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"http://127.0.0.1:{port}/admin/status", headers={"Authorization": f"Bearer {TOKEN}"},
                           timeout=10).json()["bundle"]
        if status["version"] == version and status["standby_version"] == version:
            return
        time.sleep(0.1)
    raise RuntimeError(f"bundle {version} not served after {timeout}s")


def wait_answered(port: int, timeout: float = 60) -> list[str]:
    """Until the live path's row overlay answers for a table (service.live_rows); those tables."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        rows = httpx.get(f"http://127.0.0.1:{port}/admin/status", headers={"Authorization": f"Bearer {TOKEN}"},
                         timeout=10).json()["live"].get("rows") or {}
        if rows.get("tables_answered") or time.monotonic() > deadline:
            return rows.get("tables_answered") or []
        time.sleep(0.1)


def wait_settled(port: int, timeout: float = 3600) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = httpx.get(f"http://127.0.0.1:{port}/admin/status", headers={"Authorization": f"Bearer {TOKEN}"},
                           timeout=10).json()["bundle"]
        if status["version"] is not None and status["standby_version"] == status["version"]:
            return
        time.sleep(0.25)
    raise RuntimeError("the service's standby side never caught up")


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def log_server_side(port: int) -> None:
    """The service's own view (its /metrics histograms): mean time in the app per route, to tell
    server time from transport and queueing in the client's numbers."""
    import httpx

    sums: dict[str, list[float]] = {}
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text.splitlines():
        for kind in ("_sum", "_count"):
            if line.startswith(f"streamrec_request_seconds{kind}{{"):
                route = line.split('route="')[1].split('"')[0]
                sums.setdefault(route, [0.0, 0.0])[kind == "_count"] += float(line.rsplit(" ", 1)[1])
    for route, (total, count) in sorted(sums.items()):
        if count:
            log(f"server-side mean {route}: {1000 * total / count:.3f} ms over {int(count)} requests")


def print_table(out: dict[str, Any], extra: dict[str, Any], stream: Any) -> None:
    ratio = out["lookup_rps"] / out["bare_rps"] if out["bare_rps"] else float("nan")
    rows = [
        ("single-id lookup rate", f"{out['lookup_rps']:.0f} req/s", f"bare {out['bare_rps']:.0f} req/s",
         f"{ratio:.2f}x bare (target >= 0.5x); medians of {extra['rounds']} alternating rounds"),
        ("single-id lookup p99", f"{out['lookup_p99_ms']:.2f} ms", f"bare {extra['bare_p99_ms']:.2f} ms",
         "target <= 5 ms"),
        ("1000-id lookup p99", f"{out['batch1000_p99_ms']:.2f} ms", "", ""),
        ("similar items top-10 p99", f"{out['similar_p99_ms']:.2f} ms", f"index {extra['index']}", "target <= 10 ms"),
        ("recommend top-10 p99", f"{out['recommend_p99_ms']:.2f} ms", "", ""),
        (f"{extra['delta_rows']}-row delta apply", f"{out['delta_apply_s']:.2f} s",
         f"visible after {extra['delta_visible_s']:.2f} s", "until servable"),
        ("single lookup p99 during apply", f"{out['p99_during_apply_ms']:.2f} ms",
         f"{extra['during_apply_requests']} requests", ""),
    ]
    print(f"streamrec service: {extra['rows']} rows (dim {extra['dim']}, {extra['shards']} shards), "
          f"{extra['items']} items; rates at {extra['concurrency']} connections, p99 at "
          f"{extra['latency_concurrency']}; {extra['duration_s']:.0f}s per scenario; 1-min load average "
          f"{extra['loadavg_start']:.1f} at start, {extra['loadavg_end']:.1f} at end ({os.cpu_count()} cores); "
          f"service RSS {extra['service_rss_gib']:.2f} GiB (two copies of the tables)", file=stream)
    if "live_lookup_lat_p99_ms" in out:
        for label, k in (("lookup p99", "lookup_lat"), ("similar p99", "similar"), ("recommend p99", "recommend")):
            live_ms, base_ms = out[f"live_{k}_p99_ms"], out[f"pushes_{k}_p99_ms"]
            per_round = out[f"live_{k}_round_ratios"]
            rows.append((f"{label}, pushes flowing", f"{live_ms:.2f} ms", f"pass-bundle path {base_ms:.2f} ms",
                         f"{live_ms / base_ms:.2f}x the pass-bundle path (target ~1x); rounds "
                         f"{min(per_round):.2f}-{max(per_round):.2f}x"))
        rows.append(("live path", f"{extra['live_pushed_rate']:.0f} rows/s",
                     f"{extra['live_items_refreshed']} items refreshed",
                     f"item freshness p50 {extra['live_item_freshness_p50_s']} s, "
                     f"p95 {extra['live_item_freshness_p95_s']} s (push -> index)"))
        lr = extra.get("live_rows") or {}
        rows.append(("row overlay", f"{lr.get('rows_held')} rows held",
                     f"lookups from memory {lr.get('lookups_from_memory')}, "
                     f"read through {lr.get('lookups_read_through')}",
                     f"row freshness p50 {lr.get('row_freshness_p50_s')} s, p95 {lr.get('row_freshness_p95_s')} s "
                     "(push -> overlay)"))
    for r in rows:
        print(f"  {r[0]:<32} {r[1]:>14}   {r[2]:<26} {r[3]}", file=stream)


if __name__ == "__main__":
    sys.exit(main())
