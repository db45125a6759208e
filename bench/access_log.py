"""What the service's access log costs: `streamrec serve` with the access log off (the baseline),
on in text and on in JSON lines, each loaded by bench/http_load.py on `/healthz`, the route that
does least besides (so the log's share of a request is at its largest: an upper bound). The
roles log to a file, as under `up`. Configurations alternate over ``--rounds`` so a drift of the
machine's load falls on each alike; the best round of each is compared. Then, in this process and
without HTTP (whose noise on a shared machine is larger than the log's cost), the CPU per request
of the access-log middleware around a trivial ASGI app, off, text and JSON, its writer thread's
CPU included.

    python -m bench.access_log [--duration 8] [--concurrency 8] [--rounds 2] [--requests 20000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from core.logs import LoggingConfig, configure
from core.ports import free_ports
from service.access_log import AccessLogMiddleware, AccessLogWriter

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {"off": {"access_log": False}, "text": {"access_log": True, "format": "text"},
           "json": {"access_log": True, "format": "json"}}


def _serve(tmp: Path, name: str, logging: dict[str, Any]) -> tuple[subprocess.Popen, int, Path]:
    (port,) = free_ports(1)
    config = tmp / f"{name}.yaml"
    config.write_text(yaml.safe_dump({"exports_dir": str(tmp / "exports"), "logging": logging}))
    log = tmp / f"{name}-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--config", str(config), "--port", str(port)],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "STREAMREC_ADMIN_TOKEN": "bench-access-log-token-0123456789"})
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc, port, log
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("serve did not answer within 120 s")
        time.sleep(0.2)


def _load(tmp: Path, port: int, *, duration: float, concurrency: int) -> dict[str, Any]:
    spec = tmp / "spec.json"
    spec.write_text(json.dumps({"host": "127.0.0.1", "port": port, "concurrency": concurrency, "duration": duration,
                                "warmup": 1.0, "requests": [["GET", "/healthz", None]]}))
    done = subprocess.run([sys.executable, "-m", "bench.http_load", str(spec)], cwd=REPO, capture_output=True,
                          text=True, check=True, timeout=duration + 120)
    return json.loads(done.stdout)


async def _trivial_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _requests(middleware: AccessLogMiddleware, n: int) -> None:
    scope = {"type": "http", "method": "GET", "path": "/healthz", "headers": []}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: Any) -> None:
        pass

    for _ in range(n):
        await middleware(scope, receive, send)


def in_process(tmp: Path, requests: int) -> dict[str, float]:
    """CPU microseconds per request of the middleware, off and in each format, into the role's log file."""
    out = {}
    for name, logging in CONFIGS.items():
        config = LoggingConfig(**logging)
        configure(role="service", config=config, path=tmp / f"in-process-{name}.log")
        writer = AccessLogWriter(requests)
        writer.start()
        cpu = time.process_time()
        asyncio.run(_requests(AccessLogMiddleware(_trivial_app, config=config, writer=writer), requests))
        writer.close()
        out[name] = (time.process_time() - cpu) / requests * 1e6
    return out


def run(*, duration: float, concurrency: int, rounds: int, requests: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="bench-access-log-") as d:
        tmp = Path(d)
        for _ in range(rounds):
            for name, logging in CONFIGS.items():
                proc, port, log = _serve(tmp, name, logging)
                try:
                    result = _load(tmp, port, duration=duration, concurrency=concurrency)
                finally:
                    proc.terminate()
                    proc.wait(timeout=60)
                lines = sum(1 for line in log.read_text(errors="replace").splitlines() if "service.access" in line)
                runs[name].append({**result, "access_lines": lines})
        cpu_us = in_process(tmp, requests)
    best = {name: max(rs, key=lambda r: r["rps"]) for name, rs in runs.items()}
    return {"route": "/healthz", "duration_s": duration, "concurrency": concurrency, "rounds": rounds,
            "best": best, "runs": runs,
            "rps_ratio_text_vs_off": best["text"]["rps"] / best["off"]["rps"],
            "rps_ratio_json_vs_off": best["json"]["rps"] / best["off"]["rps"],
            "in_process_requests": requests, "in_process_cpu_us": cpu_us}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of load per run")
    ap.add_argument("--concurrency", type=int, default=8, help="connections, one request in flight each")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each configuration, alternating")
    ap.add_argument("--requests", type=int, default=20_000, help="requests of the in-process measurement")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    out = run(duration=args.duration, concurrency=args.concurrency, rounds=args.rounds, requests=args.requests)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"GET /healthz, {args.concurrency} connections, {args.duration:g} s per run, best of {args.rounds}")
    print(f"{'access log':>10} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'lines':>7}")
    for name, r in out["best"].items():
        print(f"{name:>10} {r['rps']:8.0f} {r['p50_ms']:7.2f} {r['p99_ms']:7.2f} {r['access_lines']:7d}")
    print(f"throughput with the access log / without: text {out['rps_ratio_text_vs_off']:.3f}, "
          f"json {out['rps_ratio_json_vs_off']:.3f}")
    cpu = out["in_process_cpu_us"]
    print(f"in process, {args.requests} requests: CPU us per request of the middleware: "
          + ", ".join(f"{name} {us:.1f}" for name, us in cpu.items())
          + f"; the log's own: text {cpu['text'] - cpu['off']:.1f}, json {cpu['json'] - cpu['off']:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
