"""Closed-loop HTTP/1.1 load generator on raw asyncio streams (keep-alive, one request in
flight per connection). Much lighter than an HTTP client library, so on a small machine the
server, not the generator, is what gets measured.

Run as a process: ``python -m bench.http_load SPEC.json`` prints one JSON object. SPEC:
``{"host", "port", "concurrency", "duration", "warmup", "requests": [[method, path, body|null], ...]}``
(requests are cycled; each connection starts at its own offset); ``"raw": true`` adds every
request's wall-clock start and latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np


def encode(method: str, path: str, body: Any) -> bytes:
    if body is None:
        return f"{method} {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    data = json.dumps(body, separators=(",", ":")).encode()
    head = (f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    if length:
        await reader.readexactly(length)
    return status


async def _connection(host: str, port: int, reqs: list[bytes], start: int, t_warm: float, t_end: float,
                      lat: list[tuple[float, float]], statuses: dict[int, int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = start
    try:
        while True:
            t0 = time.perf_counter()
            if t0 >= t_end:
                return
            writer.write(reqs[i % len(reqs)])
            i += 1
            status = await _read_response(reader)
            t1 = time.perf_counter()
            if t0 >= t_warm:
                lat.append((t0, t1 - t0))
                statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    reqs = [encode(m, p, b) for m, p, b in spec["requests"]]
    lat: list[tuple[float, float]] = []
    statuses: dict[int, int] = {}
    t_warm = time.perf_counter() + spec.get("warmup", 1.0)
    t_end = t_warm + spec["duration"]
    c = spec["concurrency"]
    await asyncio.gather(*(_connection(spec["host"], spec["port"], reqs, k * len(reqs) // c, t_warm, t_end, lat,
                                       statuses) for k in range(c)))
    a = np.array([x for _, x in lat]) * 1000.0
    out = {"requests": int(a.shape[0]), "rps": a.shape[0] / spec["duration"],
            "p50_ms": float(np.percentile(a, 50)) if a.size else None,
            "p99_ms": float(np.percentile(a, 99)) if a.size else None,
            "statuses": {str(k): v for k, v in statuses.items()}}
    if spec.get("raw"):  # (wall-clock start, latency ms) per request, to cut out a time window later
        offset = time.time() - time.perf_counter()
        out["raw"] = [(t + offset, x * 1000.0) for t, x in lat]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="Closed-loop HTTP/1.1 load: prints one JSON object.")
    ap.add_argument("spec", type=Path, help="the load's JSON SPEC (see the module docstring)")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(run(json.loads(args.spec.read_text())))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
