"""Freshness benchmark: how long after the system receives an event does the service serve it?

Runs ``streamrec up`` (default settings unless --config: embedded broker, generator at
``--rates`` events/s, shards, trainers, service) in a temporary run directory, once per rate
with the live path (``service.read_through`` with its item refresh, service.live_items) and once
with the pass-bundle path alone (no read-through: rows and item vectors come with bundles), in
the same invocation. Once the service serves a first bundle it produces ``--markers`` events,
``--spacing`` seconds apart, each with a new user id and a new item id (values the generator
never emits), and polls until each is served:

- embedding: the user's row in ``/v1/embeddings:lookup``;
- similar-items presence: ``/v1/items/{item}/similar?raw=true`` answers (the new item is in the
  Faiss index; before that it is 404);
- recommend: the first ``/v1/recommend`` answer of the marker user that can only differ from its
  answer before the event by the user's own row (bench/recommend_probe.py: a control user no
  event names is asked just before and after each probe). With the cold-start answer (a user
  with no row gets the bundle's most liked items, the same for every such user), that is the
  first answer that differs from the control's in the same bundle version: exact, on both paths.
  Otherwise an item whose score for the control did not change kept its vector, so a changed
  score for the marker is its own vector; a change a bundle swap hides is not seen then (fewer
  served than markers; on the pass-bundle path rows change only with bundles: none).

Freshness of a marker = first time served - the time its produce call returned (the broker had
appended it: the system's receipt, not the event's own timestamp). Meanwhile bench/http_load.py
sends ``--serve-concurrency`` connections of serving traffic (a lookup, a similar-items and a
recommend request of the generator's most frequent user and item, by raw value): its p50/p99 is
the serving latency while live updates flow, against the same traffic on the pass-bundle path.
Prints p50/p95/max per artifact, rate and path, the records/s trained, the serving latencies
and each process's CPU over the measurement by role (bench/role_cpu.py: which one is saturated
when training does not keep up; human table, or ``--json``).

Sources (``--source``): ``batches`` (default) writes ``--source-rows`` generated events to a
file once and bench/rate_source.py produces them, cycled, as pre-encoded Kafka record batches at
the rate (stamped with the time of sending; 20,000 events/s take a fraction of a core), while
`up`'s own generator runs at 1 event/s; ``generator``: `up`'s generator at the rate (one Python
process: 1.3k-4.7k events/s at most on a loaded 2-core machine); ``replay``: ``up --replay`` of
``--source-rows`` events (capped at the rate, paced by the consumer lag). The table says what
flowed: the source's rate, the records/s the trainers trained (the whole job, from the pass
totals over the measurement) and the consumer lag of the last pass (trainers that cannot keep
up leave a growing lag, and markers queue behind it).

Targets: p95 <= 1 s to the embedding row and <= 2 s to similar-items presence on the live path,
at every rate; training records/s with the live path no lower than without (same rate).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench import REPO, role_cpu
from bench.recommend_probe import Answer, MarkerProbes, Probe
from bench.recommend_probe import K as RECOMMEND_K
from launcher.launch import free_ports
from logrecords.hashing import hash_strings
from logrecords.schema_config import SchemaConfig
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

TARGET_ROW_P95_S = 1.0
TARGET_ITEM_P95_S = 2.0


def _http(url: str, body: dict | None = None, timeout: float = 5.0, token: str | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(api: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"streamrec up exited with {proc.returncode} before serving")
        try:
            _http(f"{api}/readyz", timeout=2)
            return
        except (OSError, urllib.error.URLError, ValueError):
            time.sleep(0.5)
    raise SystemExit(f"no bundle served within {timeout_s:.0f} s")


def marker_values(n: int, seed: int, schema: SchemaConfig, field: str) -> tuple[list[str], np.ndarray]:
    """``n`` values of ``field`` the generator never produces (12 hex digits; it writes 8) and their feature ids."""
    rng = np.random.default_rng(seed)
    raw = [f"{int(x):012x}" for x in rng.integers(1 << 40, 1 << 47, n)]
    slot = next(s for s in schema.sparse_slots if s.name == field)
    ids, valid = hash_strings(raw, slot_id=schema.slot_ids()[slot.name], kind=slot.hash)
    assert valid.all()
    return raw, ids


def _trained(api: str, token: str) -> float | None:
    try:
        return float(_http(f"{api}/admin/status", token=token)["job"]["status"]["records_total"])
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
        return None


def job_throughput(api: str, token: str, since_wall: float, until_wall: float) -> dict[str, Any]:
    """Records/s the whole job trained between the first and the last pass committed while the
    source ran (``since_wall`` .. ``until_wall``; the pass totals: every worker), and the consumer
    lag of that last pass. Passes outside the window would mix in the idle stream before and
    after the source (1 event/s): a trainer that keeps up then reads as slower than the source."""
    try:
        points = _http(f"{api}/admin/passes?since=-1", token=token, timeout=10)["points"]
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
        return {"train_rate": None, "lag": None}
    inside = [p for p in points if since_wall <= p["time"] <= until_wall]
    if len(inside) < 2:
        return {"train_rate": None, "lag": inside[-1].get("lag") if inside else None}
    a, b = inside[0], inside[-1]
    return {"train_rate": round((b["records_total"] - a["records_total"]) / (b["time"] - a["time"]), 1),
            "lag": b.get("lag")}


def start_source(kafka: KafkaConfig, events: Path, rate: float, duration_s: float) -> subprocess.Popen:
    """bench/rate_source.py producing ``events`` at ``rate`` (its JSON on stdout when it ends)."""
    spec = {"file": str(events), "rate": rate, "duration": duration_s, "bootstrap": kafka.bootstrap_servers[0],
            "topic": kafka.topic, "partitions": kafka.partitions}
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    return subprocess.Popen([sys.executable, "-m", "bench.rate_source", path], stdout=subprocess.PIPE, cwd=REPO)


def stop_source(proc: subprocess.Popen) -> dict[str, Any] | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # it reports what it sent up to now
    out = proc.communicate(timeout=60)[0]
    return json.loads(out) if out else None


def _present(api: str, item: str) -> bool:
    try:
        _http(f"{api}/v1/items/{urllib.parse.quote(item)}/similar?raw=true&k=1", timeout=5)
        return True
    except urllib.error.HTTPError:
        return False
    except (OSError, urllib.error.URLError, ValueError):
        return False


# the generator's most frequent user and item (README quick start): served in every run
SERVE_REQUESTS = [
    ["POST", "/v1/embeddings:lookup", {"slot": "user_id", "values": ["ae4311ff"]}],
    ["GET", "/v1/items/aae76e28/similar?k=10&raw=true", None],
    ["POST", "/v1/recommend", {"user": {"user_id": "ae4311ff"}, "k": 10}],
]


def serve_load(api: str, concurrency: int, duration_s: float) -> subprocess.Popen:
    """bench/http_load.py against the service in the background (its JSON on stdout)."""
    port = int(api.rsplit(":", 1)[1])
    spec = {"host": "127.0.0.1", "port": port, "concurrency": concurrency, "duration": duration_s, "warmup": 0.5,
            "requests": SERVE_REQUESTS}
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(spec, f)
    return subprocess.Popen([sys.executable, "-m", "bench.http_load", path], stdout=subprocess.PIPE, cwd=REPO)


def _recommend(api: str, user: str, field: str) -> Answer | None:
    try:
        return Answer.of(_http(f"{api}/v1/recommend", {"user": {field: user}, "k": RECOMMEND_K}, timeout=5))
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
        return None


def _bracketed(api: str, users: list[str], control: str, field: str, *, each: bool = True) -> dict[int, Probe]:
    """One recommend probe of each of ``users`` (by index) between two answers of the control: around
    each user (``each``: control, user 0, control, user 1, control...; the index swaps ~2 times a
    second), or around all of them (the cold-start rule needs the bundle version only)."""
    before = _recommend(api, control, field)
    out: dict[int, Probe] = {}
    if before is None:
        return out
    answers: dict[int, Answer] = {}
    for i, u in enumerate(users):
        answer = _recommend(api, u, field)
        if answer is not None:
            answers[i] = answer
        if each or i == len(users) - 1:
            after = _recommend(api, control, field)
            if after is None:
                return out
            out.update((j, Probe(before, a, after)) for j, a in answers.items())
            answers, before = {}, after
    return out


def measure(api: str, token: str, kafka: KafkaConfig, schema: SchemaConfig, *, markers: int, spacing_s: float,
            timeout_s: float, seed: int, recommend: bool = True) -> dict[str, Any]:
    """Produce the markers from this thread; probe threads (rows, items, recommend) poll apart, so a
    slow answer of one kind does not delay noticing another. ``recommend``: time recommend too
    (bench/recommend_probe.py)."""
    users, user_ids = marker_values(markers, seed, schema, schema.user_id)
    items, _ = marker_values(markers, seed + 1, schema, schema.item_id)
    control = marker_values(1, seed + 2, schema, schema.user_id)[0][0]  # a user no event names
    produced: dict[int, float] = {}
    rows: dict[int, float] = {}
    present: dict[int, float] = {}
    recommended: dict[int, float] = {}
    history = {i: MarkerProbes() for i in range(markers)}
    lookup_s: list[float] = []
    stop = threading.Event()

    def probe_rows() -> None:
        while not stop.is_set() and len(rows) < markers:
            pending = [i for i in list(produced) if i not in rows]
            if pending:
                t0 = time.monotonic()
                try:
                    found = _http(f"{api}/v1/embeddings:lookup",
                                  {"slot": schema.user_id, "ids": [int(user_ids[i]) for i in pending]})["ids"]
                except (OSError, urllib.error.URLError, ValueError):
                    found = []
                t = time.monotonic()
                lookup_s.append(t - t0)
                index = {int(user_ids[i]): i for i in pending}
                for fid in found:
                    rows[index[int(fid)]] = t
            stop.wait(0.01)

    def probe_items() -> None:
        while not stop.is_set() and len(present) < markers:
            for i in [i for i in list(produced) if i not in present]:
                if _present(api, items[i]):
                    present[i] = time.monotonic()
            stop.wait(0.01)

    def probe_recommend() -> None:
        while not stop.is_set() and len(recommended) < markers:
            pending = [i for i in list(produced) if i not in recommended]
            for group, each in (([i for i in pending if history[i].cold], False),
                                ([i for i in pending if not history[i].cold], True)):
                got = _bracketed(api, [users[i] for i in group], control, schema.user_id, each=each) if group else {}
                t = time.monotonic()
                for j, probe in got.items():
                    if history[group[j]].changed_with(probe):
                        recommended[group[j]] = t
            stop.wait(0.05)

    def complete() -> bool:
        if len(rows) < markers or len(present) < markers:
            return False
        # a recommend change a bundle swap hid is never seen: wait for it a few seconds past the rows
        return not recommend or len(recommended) == markers or time.monotonic() - max(rows.values()) > 5.0

    probes = [threading.Thread(target=f, daemon=True)
              for f in (probe_rows, probe_items, *((probe_recommend,) if recommend else ()))]
    t_start, n_start = time.monotonic(), _trained(api, token)
    with RecordProducer(kafka, client_options(kafka, list(kafka.bootstrap_servers))) as producer:
        for t in probes:
            t.start()
        start = time.monotonic()
        for i in range(markers):
            time.sleep(max(0.0, start + i * spacing_s - time.monotonic()))
            if recommend:  # the marker's answer before its event: what a later answer is compared with
                first = _bracketed(api, [users[i]], control, schema.user_id)
                if first:
                    history[i].changed_with(first[0])
                else:  # no answer before the event: compared with its first probe after it
                    history[i].cold = False
            record = {"label": 1, "ts": time.time(), schema.user_id: users[i], schema.item_id: items[i]}
            producer.send_all([json.dumps(record).encode()])  # flushed: the broker appended it
            produced[i] = time.monotonic()
        deadline = time.monotonic() + timeout_s
        while not complete() and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for t in probes:
            t.join()
    t_end, n_end = time.monotonic(), _trained(api, token)
    rate = None if n_start is None or n_end is None else (n_end - n_start) / (t_end - t_start)
    p99 = round(float(np.percentile(lookup_s, 99)) * 1000, 2) if lookup_s else None
    return {"row": [rows[i] - produced[i] for i in rows], "item": [present[i] - produced[i] for i in present],
            "recommend": [recommended[i] - produced[i] for i in recommended] if recommend else None,
            "train_rate": rate, "lookup_p99_ms": p99}


def _summary(lat: list[float], markers: int) -> dict[str, Any]:
    got = np.array(lat)

    def pct(q: float) -> float | None:
        return round(float(np.percentile(got, q)), 3) if got.size else None

    return {"served": int(got.size), "of": markers, "p50": pct(50), "p95": pct(95), "max": pct(100)}


def run_up(config: Path, args: argparse.Namespace, rate: float, events: Path | None = None) -> dict[str, Any]:
    """One `streamrec up` in a fresh run directory: the marker latencies, summarized."""
    run_dir = Path(tempfile.mkdtemp(prefix="streamrec-freshness-"))
    (port,) = free_ports(1)
    api = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "cli", "up", "--plain", "--run-dir", str(run_dir), "--port", str(port),
            "--config", str(config)]
    if events is not None and args.source == "replay":
        argv += ["--replay", str(events)]
    log = open(run_dir / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(api, proc, timeout_s=240)
        effective = yaml.safe_load((run_dir / "streamrec.yaml").read_text())
        kafka = KafkaConfig.model_validate(_known(KafkaConfig, effective["kafka"]))
        schema = SchemaConfig.model_validate(_known(SchemaConfig, effective["schema"]))
        token = (run_dir / "admin-token").read_text().strip()
        source = start_source(kafka, events, rate, args.warmup + args.markers * args.spacing + args.timeout) \
            if events is not None and args.source == "batches" else None
        since_wall = time.time() + 1.0  # training throughput: from the source's start (passes every ~2 s)
        time.sleep(args.warmup)  # the stream at its rate, a few passes behind it
        loader = serve_load(api, args.serve_concurrency, args.markers * args.spacing + 2.0) \
            if args.serve_concurrency else None
        roots = [p.pid for p in (proc, source, loader) if p is not None]
        cpu_a, cpu_t = role_cpu.sample(roots), time.monotonic()
        got = measure(api, token, kafka, schema, markers=args.markers, spacing_s=args.spacing,
                      timeout_s=args.timeout, seed=args.seed)
        cpu = role_cpu.usage(cpu_a, role_cpu.sample(roots), time.monotonic() - cpu_t)
        serving = json.loads(loader.communicate(timeout=600)[0]) if loader is not None else None
        until_wall = time.time()
        sent = stop_source(source) if source is not None else None
        live_status = _http(f"{api}/admin/status", token=token).get("live")
        job = job_throughput(api, token, since_wall, until_wall)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # `up` stops every role it started
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    return {"row": _summary(got["row"], args.markers), "item": _summary(got["item"], args.markers),
            "recommend": None if got["recommend"] is None else _summary(got["recommend"], args.markers),
            "source_rate": None if sent is None else sent["rate"], "source": sent,
            "train_rate": job["train_rate"], "lag": job["lag"],
            "chief_train_rate": None if got["train_rate"] is None else round(got["train_rate"], 1),
            "lookup_p99_ms": got["lookup_p99_ms"], "service_live": live_status, "run_dir": str(run_dir),
            # % of one core per process of each role over the measurement (bench/role_cpu.py)
            "cpu_percent": cpu, "load": os.getloadavg(),
            "trainer_cpu_us_per_record": None if not job["train_rate"] else round(
                sum(cpu.get("trainer", [])) / 100 / job["train_rate"] * 1e6, 1),
            "serving": None if serving is None else {
                "p50_ms": _r(serving["p50_ms"]), "p99_ms": _r(serving["p99_ms"]),
                "rps": round(serving["rps"], 1), "statuses": serving["statuses"]}}


def _known(model: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The keys ``model`` knows (the file may come from a newer or older streamrec)."""
    return {k: v for k, v in data.items() if k in model.model_fields}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _bad(serving: dict[str, Any]) -> int:
    return sum(n for code, n in (serving.get("statuses") or {}).items() if code != "200")


def run_config(config: str | None, *, rate: float, live: bool, source: str, batch_wait_ms: int | None = None) -> Path:
    """The user's config (or defaults) with the generator at ``rate`` events/s and the live path on or off;
    ``batch_wait_ms``: how long a Kafka poll and a short mini-batch may wait for more records."""
    data = (yaml.safe_load(Path(config).read_text()) if config else {}) or {}
    if batch_wait_ms is not None:
        data.setdefault("kafka", {})["batch_timeout_ms"] = max(1, batch_wait_ms)
        data.setdefault("train", {})["batch_wait_ms"] = batch_wait_ms
    up = data.setdefault("up", {})
    # with the batches source, `up`'s own generator only trickles (bench/rate_source.py brings the rate)
    up["generator"] = {**(up.get("generator") or {}), "rate": 1.0 if source == "batches" else rate}
    up["replay"] = {**(up.get("replay") or {}), "rate": rate}  # used with --replay-rows
    service = data.setdefault("service", {})
    if live:  # `up` points the read-through at its own shards, with the run's secret
        service["read_through"] = {**(service.get("read_through") or {}), "endpoints": ["tcp://127.0.0.1:1"]}
    else:
        service.pop("read_through", None)
    path = Path(tempfile.mkdtemp(prefix="streamrec-freshness-cfg-")) / ("live.yaml" if live else "pass.yaml")
    path.write_text(yaml.safe_dump(data))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="streamrec YAML for `up` (default: built-in defaults)")
    ap.add_argument("--rates", default="500,20000", help="generator rates (events/s), comma-separated")
    ap.add_argument("--markers", type=int, default=20)
    ap.add_argument("--spacing", type=float, default=0.5, help="seconds between marker events")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds of stream before the first marker")
    ap.add_argument("--timeout", type=float, default=30.0, help="give up on a marker after this many seconds")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--serve-concurrency", type=int, default=2,
                    help="connections of serving traffic during the measurement (0: none)")
    ap.add_argument("--batch-wait-ms", type=int, default=None,
                    help="set kafka.batch_timeout_ms and train.batch_wait_ms (both paths; default: the config's, "
                         "200 and 500 ms: at 500 events/s a mini-batch waits for more records up to 0.7 s)")
    ap.add_argument("--source", choices=["batches", "generator", "replay"], default="batches",
                    help="where the stream comes from (module docstring); default: pre-encoded record batches")
    ap.add_argument("--source-rows", type=int, default=200_000,
                    help="generated events written once for the batches (cycled) and replay sources")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    events = None
    if args.source != "generator":
        events = Path(tempfile.mkdtemp(prefix="streamrec-freshness-events-")) / "events.jsonl"
        subprocess.run([sys.executable, "-m", "cli", "generate", "--out", str(events), "--rows",
                        str(args.source_rows), "--format", "json"], check=True, stdout=subprocess.DEVNULL)

    runs: list[dict[str, Any]] = []
    for rate in [float(r) for r in args.rates.split(",")]:
        for live in (True, False):
            config = run_config(args.config, rate=rate, live=live, source=args.source,
                                batch_wait_ms=args.batch_wait_ms)
            runs.append({"rate": rate, "path": "live" if live else "pass-bundle",
                         **run_up(config, args, rate, events)})
    if events is not None:
        events.unlink(missing_ok=True)
    met = all(r["row"]["served"] == args.markers and r["row"]["p95"] is not None
              and r["row"]["p95"] <= TARGET_ROW_P95_S and r["item"]["served"] == args.markers
              and r["item"]["p95"] is not None and r["item"]["p95"] <= TARGET_ITEM_P95_S
              for r in runs if r["path"] == "live")
    result = {"markers": args.markers, "config": args.config or "defaults", "batch_wait_ms": args.batch_wait_ms,
              "source": {"batches": f"bench/rate_source.py, {args.source_rows} pre-encoded events cycled",
                         "replay": f"up --replay of {args.source_rows} events",
                         "generator": "up's generator"}[args.source],
              "runs": runs,
              "target_row_p95_s": TARGET_ROW_P95_S, "target_item_p95_s": TARGET_ITEM_P95_S,
              "targets_met": met, "load": os.getloadavg()}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'rate ev/s':>10} {'path':<12}{'row p50':>9}{'row p95':>9}{'rows':>7}{'item p50':>10}{'item p95':>10}"
          f"{'items':>7}{'rec p50':>9}{'rec p95':>9}{'recs':>7}{'sent/s':>9}{'train/s':>9}{'lag':>8}"
          f"{'serve p50 ms':>14}{'serve p99 ms':>14}")
    for r in runs:
        rec = r["recommend"] or {"p50": "n/a", "p95": "n/a", "served": "-"}
        print(f"{r['rate']:>10g} {r['path']:<12}{r['row']['p50']!s:>9}{r['row']['p95']!s:>9}"
              f"{r['row']['served']:>4}/{args.markers:<2}{r['item']['p50']!s:>10}{r['item']['p95']!s:>10}"
              f"{r['item']['served']:>4}/{args.markers:<2}{rec['p50']!s:>9}{rec['p95']!s:>9}"
              f"{rec['served']!s:>4}/{args.markers:<2}{r['source_rate']!s:>9}{r['train_rate']!s:>9}"
              f"{r['lag']!s:>8}"
              f"{(r['serving'] or {}).get('p50_ms')!s:>14}{(r['serving'] or {}).get('p99_ms')!s:>14}")
    print("CPU, % of one core per process over the measurement (2 cores in all; load average when it ended):")
    for r in runs:
        roles = ", ".join(f"{role} {'/'.join(str(x) for x in v)}" for role, v in r["cpu_percent"].items())
        print(f"  {r['rate']:g} {r['path']}: {roles}; trainers {r['trainer_cpu_us_per_record']} CPU-us per record "
              f"trained; load {r['load'][0]:.1f}")
    by = {(r["rate"], r["path"]): r for r in runs}
    for rate in sorted({r["rate"] for r in runs}):
        live, base = by[(rate, "live")], by[(rate, "pass-bundle")]
        ratio = (f"{live['train_rate'] / base['train_rate']:.2f}" if live["train_rate"] and base["train_rate"]
                 else "n/a")
        sv, sb = live["serving"] or {}, base["serving"] or {}
        p99 = f"{sv['p99_ms'] / sb['p99_ms']:.2f}" if sv.get("p99_ms") and sb.get("p99_ms") else "n/a"
        print(f"{rate:g} ev/s: training records/s live / pass-bundle = {ratio}; serving p99 live / pass-bundle = "
              f"{p99} (non-200 answers: {_bad(sv)} / {_bad(sb)})")
    print(f"targets (live path, every rate: row p95 <= {TARGET_ROW_P95_S:g} s, similar-items p95 <= "
          f"{TARGET_ITEM_P95_S:g} s): {'met' if met else 'NOT met'}; load average {os.getloadavg()[0]:.1f}")
    print(f"source: {result['source']}; logs: " + ", ".join(r["run_dir"] for r in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
