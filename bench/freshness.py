"""Freshness benchmark: how long after an event is produced does the service serve it?

Runs ``streamrec up`` (default settings unless --config: embedded broker, generator, shards,
trainers, service) in a temporary run directory. Once the service serves a first bundle,
it produces one event for each of ``--markers`` new user ids (ids the generator never
emits), spread ``--spacing`` seconds apart, and polls ``/v1/embeddings:lookup`` for every
pending marker until its row appears (a new id has no served row before its event is
trained and exported). Freshness of a marker = time its row first appears - time its event
was produced. Prints p50/p95/max (human table, or ``--json``).

Target: p95 <= 5 s. Baseline, in the same run: the same system with a pass (and export) every
10 s, the shortest interval at which Monolith syncs touched keys to serving (10 s to a
minute); ``--baseline-seconds 0`` skips it.
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
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# Run as a script, bench/ comes first on sys.path and bench/tables.py would shadow the tables package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from ps.launcher import free_ports  # noqa: E402
from streaming.connection import client_options  # noqa: E402
from streaming.hashing import hash_strings  # noqa: E402
from streaming.producer import RecordProducer  # noqa: E402
from streaming.stream_config import KafkaConfig, SchemaConfig  # noqa: E402

TARGET_P95_S = 5.0


def _http(url: str, body: dict | None = None, timeout: float = 5.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
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


def marker_ids(n: int, seed: int, schema: SchemaConfig) -> tuple[list[str], np.ndarray]:
    """``n`` user-id values the generator never produces (12 hex digits; it writes 8) and their feature ids."""
    rng = np.random.default_rng(seed)
    raw = [f"{int(x):012x}" for x in rng.integers(1 << 40, 1 << 47, n)]
    slot = next(s for s in schema.sparse_slots if s.name == schema.user_id)
    ids, valid = hash_strings(raw, slot_id=schema.slot_ids()[slot.name], kind=slot.hash)
    assert valid.all()
    return raw, ids


def measure(api: str, kafka: KafkaConfig, schema: SchemaConfig, *, markers: int, spacing_s: float,
            timeout_s: float, seed: int) -> list[float | None]:
    raw, ids = marker_ids(markers, seed, schema)
    produced: dict[int, float] = {}
    seen: dict[int, float] = {}
    slot = schema.user_id
    with RecordProducer(kafka, client_options(kafka, list(kafka.bootstrap_servers))) as producer:
        start = time.monotonic()
        next_marker = 0
        while len(seen) < markers and time.monotonic() - start < markers * spacing_s + timeout_s:
            now = time.monotonic()
            if next_marker < markers and now >= start + next_marker * spacing_s:
                record = {"label": 1, "ts": time.time(), slot: raw[next_marker]}
                producer.send_all([json.dumps(record).encode()])  # flushed: produced now
                produced[next_marker] = time.monotonic()
                next_marker += 1
            pending = [i for i in produced if i not in seen]
            if pending:
                try:
                    found = _http(f"{api}/v1/embeddings:lookup",
                                  {"slot": slot, "ids": [int(ids[i]) for i in pending]})["ids"]
                except (OSError, urllib.error.URLError, ValueError):
                    found = []
                t = time.monotonic()
                index = {int(ids[i]): i for i in pending}
                for fid in found:
                    seen[index[int(fid)]] = t
            time.sleep(0.05)
    return [seen[i] - produced[i] if i in seen else None for i in range(markers)]


def run_up(config: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """One `streamrec up` in a fresh run directory: the marker latencies, summarized."""
    run_dir = Path(tempfile.mkdtemp(prefix="streamrec-freshness-"))
    (port,) = free_ports(1)
    api = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "deploy.cli", "up", "--plain", "--run-dir", str(run_dir), "--port", str(port)]
    if config is not None:
        argv += ["--config", str(config)]
    log = open(run_dir / "up.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(api, proc, timeout_s=240)
        effective = yaml.safe_load((run_dir / "streamrec.yaml").read_text())
        kafka = KafkaConfig.model_validate(effective["kafka"])
        schema = SchemaConfig.model_validate(effective["schema"])
        lat = measure(api, kafka, schema, markers=args.markers, spacing_s=args.spacing, timeout_s=args.timeout,
                      seed=args.seed)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # `up` stops every role it started
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    got = np.array([x for x in lat if x is not None])

    def pct(q: float) -> float | None:
        return round(float(np.percentile(got, q)), 3) if got.size else None

    return {"served": int(got.size), "p50": pct(50), "p95": pct(95), "max": pct(100),
            "pass_seconds": effective["train"]["passes"]["seconds"], "run_dir": str(run_dir)}


def baseline_config(config: str | None, seconds: float) -> Path:
    """The same system with Monolith's shortest sync interval: a pass (and export) every ``seconds``."""
    data = yaml.safe_load(Path(config).read_text()) if config else {}
    data = data or {}
    train = data.setdefault("train", {})
    train["passes"] = {**(train.get("passes") or {}), "seconds": seconds, "records": None}
    path = Path(tempfile.mkdtemp(prefix="streamrec-freshness-baseline-")) / "baseline.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="streamrec YAML for `up` (default: built-in defaults)")
    ap.add_argument("--markers", type=int, default=50)
    ap.add_argument("--spacing", type=float, default=0.5, help="seconds between marker events")
    ap.add_argument("--timeout", type=float, default=60.0, help="give up on a marker after this many seconds")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--baseline-seconds", type=float, default=10.0,
                    help="baseline: the same system syncing every this many seconds (Monolith's minimum); 0: skip")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    ours = run_up(Path(args.config) if args.config else None, args)
    base = run_up(baseline_config(args.config, args.baseline_seconds), args) if args.baseline_seconds > 0 else None
    result: dict[str, Any] = {
        "markers": args.markers,
        "served": ours["served"],
        "freshness_p50_s": ours["p50"],
        "freshness_p95_s": ours["p95"],
        "freshness_max_s": ours["max"],
        "pass_seconds": ours["pass_seconds"],
        "target_p95_s": TARGET_P95_S,
        "config": args.config or "defaults",
    }
    result["target_met"] = bool(ours["p95"] is not None and ours["served"] == args.markers
                                and ours["p95"] <= TARGET_P95_S)
    if base is not None:
        result |= {"baseline_pass_seconds": base["pass_seconds"], "baseline_served": base["served"],
                   "baseline_freshness_p50_s": base["p50"], "baseline_freshness_p95_s": base["p95"],
                   "baseline_freshness_max_s": base["max"]}
    if args.json:
        print(json.dumps(result))
        return 0
    rows = [("streamrec (defaults)" if not args.config else f"streamrec ({args.config})", ours)]
    if base is not None:
        rows.append((f"baseline: sync every {base['pass_seconds']:g} s", base))
    print(f"{'run':<34}{'pass s':>8}{'served':>8}{'p50 s':>8}{'p95 s':>8}{'max s':>8}")
    for name, r in rows:
        print(f"{name:<34}{r['pass_seconds']:>8g}{r['served']:>5}/{args.markers:<2}{r['p50']!s:>8}{r['p95']!s:>8}"
              f"{r['max']!s:>8}")
    verdict = "met" if result["target_met"] else "NOT met"
    print(f"target p95 <= {TARGET_P95_S:g} s: {verdict} (p95 {ours['p95']} s over {ours['served']} markers)")
    print(f"logs: {ours['run_dir']}" + (f", {base['run_dir']}" if base else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
