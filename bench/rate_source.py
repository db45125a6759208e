"""A fast record source for benchmarks: pre-encoded Kafka record batches produced at a fixed rate.

The generator role of ``streamrec up`` samples, encodes and produces each event in one Python
process, and kafka-python's producer alone costs ~100-350 us of Python per record on a loaded
2-core machine (measured: 1.8k-2.9k records/s): neither reaches 20,000 events/s here. This
process builds Kafka v2 record batches of already encoded records (one per line of a file
written once by ``streamrec generate --out``) before it starts, then only stamps each batch
with the current time (first/max timestamp and the CRC-32C over the batch, so the broker's
timestamps are the time of sending, as a real producer's) and writes Produce requests to the
broker on one socket, ``acks=1``, a few in flight. The per-record cost is gone; per batch of
``BATCH`` records it is a header patch, a CRC and a send.

Scope: one broker that leads every partition (the embedded broker of ``streamrec up``); every
error code in a Produce response is counted and reported. Run as a process:
``python -m bench.rate_source SPEC.json`` prints one JSON object when it ends (after
``duration`` seconds or SIGTERM): records sent and acknowledged, seconds, the rate reached.
SPEC: ``{"file", "rate", "duration", "bootstrap": "host:port", "topic", "partitions"}``.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import struct
import time
from collections import deque
from pathlib import Path
from typing import Any

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

BATCH = 250  # records per partition batch at most
REQUEST_S = 0.02  # a request carries ~20 ms of the stream (a few records at 500/s), so the pace stays even
IN_FLIGHT = 4  # Produce requests awaiting their response
_ATTRIBUTES = 21  # the CRC covers the batch from its attributes field on
_CRC = 17
_TIMESTAMPS = 27  # first timestamp (int64), then max timestamp (int64)


def build_batches(records: list[bytes], per_batch: int) -> list[bytearray]:
    """The records as v2 record batches of ``per_batch`` each, every record at timestamp delta 0."""
    out = []
    for lo in range(0, len(records), per_batch):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
        for i, value in enumerate(records[lo:lo + per_batch]):
            builder.append(i, timestamp=0, key=None, value=value, headers=[])
        out.append(bytearray(builder.build()))
    return out


def stamp(batch: bytearray, now_ms: int) -> bytes:
    """``batch`` sent now: its first and max timestamp set, its CRC-32C recomputed."""
    struct.pack_into(">qq", batch, _TIMESTAMPS, now_ms, now_ms)
    struct.pack_into(">I", batch, _CRC, crc32c.crc32c(memoryview(batch)[_ATTRIBUTES:]))
    return bytes(batch)


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def produce_request(correlation: int, topic: str, batches: list[tuple[int, bytes]]) -> bytes:
    """A Produce v3 request (acks=1) of one record batch per partition, framed."""
    body = [struct.pack(">hhi", 0, 3, correlation), _string("streamrec-bench-source"),
            struct.pack(">hhi", -1, 1, 30_000), struct.pack(">i", 1), _string(topic), struct.pack(">i", len(batches))]
    for partition, records in batches:
        body += [struct.pack(">ii", partition, len(records)), records]
    data = b"".join(body)
    return struct.pack(">i", len(data)) + data


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise ConnectionError("the broker closed the connection")
        buf += got
    return bytes(buf)


def read_response(sock: socket.socket) -> list[int]:
    """One Produce v3 response: the error code of each partition."""
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    data = _read_exact(sock, size)
    pos = 4  # correlation id
    (topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    errors = []
    for _ in range(topics):
        (n,) = struct.unpack_from(">h", data, pos)
        pos += 2 + n
        (parts,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(parts):
            _, code, _, _ = struct.unpack_from(">ihqq", data, pos)
            pos += 22
            errors.append(code)
    return errors


def produce(spec: dict[str, Any]) -> dict[str, Any]:
    """Send the file's records, cycled, at ``spec["rate"]`` per second for ``spec["duration"]`` s."""
    records = [line for line in Path(spec["file"]).read_bytes().splitlines() if line]
    partitions = int(spec["partitions"])
    rate, total = float(spec["rate"]), int(float(spec["rate"]) * float(spec["duration"]))
    # records beyond what the run sends need no batch (building costs ~50 us a record)
    batches = build_batches(records[:max(total, 1)], max(1, min(BATCH, round(rate * REQUEST_S / partitions))))
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    host, port = spec["bootstrap"].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = acked = failed = 0
    pending: deque[int] = deque()  # records in each request awaiting its response
    start = time.monotonic()
    b = correlation = 0
    try:
        while sent < total and not stopping:
            group = []
            for p in range(partitions):  # one batch per partition and request
                batch = batches[b % len(batches)]
                b += 1
                group.append((p, stamp(batch, int(time.time() * 1000))))
            n = sum(struct.unpack_from(">i", r, 57)[0] for _, r in group)
            if len(pending) >= IN_FLIGHT:
                errors = read_response(sock)
                k = pending.popleft()
                bad = sum(1 for e in errors if e)
                failed += bad
                acked += k if not bad else 0
            correlation += 1
            sock.sendall(produce_request(correlation, spec["topic"], group))
            pending.append(n)
            sent += n
            ahead = sent / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        while pending:
            errors = read_response(sock)
            k = pending.popleft()
            failed += sum(1 for e in errors if e)
            acked += k if not any(errors) else 0
    finally:
        sock.close()
    seconds = time.monotonic() - start
    return {"sent": sent, "acked": acked, "failed_batches": failed, "seconds": round(seconds, 3),
            "rate": round(acked / seconds, 1), "asked": rate}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", type=Path, help="the source's JSON SPEC (see the module docstring)")
    args = ap.parse_args()
    print(json.dumps(produce(json.loads(args.spec.read_text()))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
