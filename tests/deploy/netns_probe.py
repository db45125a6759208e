"""What the multi-host test does from inside a namespace (it cannot reach 10.x addresses from
its own): ``python -m tests.deploy.netns_probe COMMAND JSON``; prints one JSON object.

- ``produce {bootstrap, kafka, n, seed}``: waits for the broker, creates the topic, produces
  ``n`` Criteo records; prints the first record's C1 value
- ``healthy {endpoints, secret_file, timeout_s}``: waits until every shard answers, signed
- ``stats {endpoints, secret_file, table}``: every shard's stats and ``table``'s rows of keys 0-3, signed
- ``http {url, method, body, token, until, timeout_s}``: one request (repeated until the
  status is ``until`` when given); prints status and JSON body
- ``unsigned {endpoints, control, wrong_secret}``: a peer without the secret: an unsigned
  health, a push and a request signed with a wrong secret, and a job-control status call
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any


def produce(a: dict[str, Any]) -> dict[str, Any]:
    from logrecords.generator import PlantedModel
    from logrecords.sample_encoding import criteo_lines
    from streaming.broker import broker_answers
    from streaming.connection import client_options
    from streaming.kafka_config import KafkaConfig
    from streaming.producer import RecordProducer
    from streaming.topics import ensure_topics

    deadline = time.monotonic() + 60
    while not broker_answers(a["bootstrap"]):
        if time.monotonic() > deadline:
            raise SystemExit(f"broker at {a['bootstrap']} did not answer")
        time.sleep(0.3)
    config = KafkaConfig(**a["kafka"])
    options = client_options(config, [a["bootstrap"]])
    ensure_topics(config, options)
    lines = list(criteo_lines(PlantedModel(seed=a["seed"]).sample(a["n"])))
    with RecordProducer(config, options) as producer:
        producer.send_all(lines)
    return {"c1": [line.split(b"\t")[14].decode() for line in lines[:20]]}


def _client(a: dict[str, Any], timeout_s: float = 5.0):
    from ps.auth import read_secret
    from ps.client import PSClient
    from ps.ps_config import ClientConfig

    secret = read_secret(a["secret_file"]) if a.get("secret_file") else None
    return PSClient(a["endpoints"], config=ClientConfig(timeout_s=timeout_s, retries=0), secret=secret)


def healthy(a: dict[str, Any]) -> dict[str, Any]:
    from core.errors import Unavailable

    deadline = time.monotonic() + a.get("timeout_s", 60)
    with _client(a, 1.0) as c:
        while True:
            try:
                return {"health": c.admin.health()}
            except Unavailable:
                if time.monotonic() > deadline:
                    raise


def stats(a: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    with _client(a) as c:
        rows = c.wait(c.pull(a["table"], np.arange(4, dtype=np.uint64))) if a.get("table") else None
        return {"stats": c.admin.stats(), "rows": None if rows is None else rows.tolist()}


def http(a: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + a.get("timeout_s", 10)
    while True:
        body = None if a.get("body") is None else json.dumps(a["body"]).encode()
        req = urllib.request.Request(a["url"], data=body, method=a.get("method", "GET"))
        if body is not None:
            req.add_header("content-type", "application/json")
        if a.get("token"):
            req.add_header("Authorization", f"Bearer {a['token']}")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        except OSError as err:
            status, raw = 0, json.dumps({"oserror": str(err)}).encode()
        until = a.get("until")
        if until is None or status == until or time.monotonic() > deadline:
            try:
                parsed: Any = json.loads(raw)
            except ValueError:
                parsed = raw.decode(errors="replace")
            return {"status": status, "body": parsed}
        time.sleep(0.3)


def _refusal(call) -> dict[str, Any]:
    from core.errors import StreamrecError

    try:
        return {"answered": call()}
    except StreamrecError as err:
        return {"error": type(err).__name__, "code": err.code, "message": str(err)}


def unsigned(a: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from jobcontrol.channel import ControlClient
    from ps.client import PSClient
    from ps.ps_config import ClientConfig

    config = ClientConfig(timeout_s=5.0, retries=0)
    out: dict[str, Any] = {}
    with PSClient(a["endpoints"], config=config) as c:
        out["health"] = _refusal(c.admin.health)
        keys = np.arange(4, dtype=np.uint64)
        out["push"] = _refusal(lambda: c.wait(c.push(a["table"], keys, np.ones((4, a["dim"]), np.float32))))
    with PSClient(a["endpoints"], config=config, secret=a["wrong_secret"].encode()) as c:
        out["wrong_secret"] = _refusal(c.admin.stats)
    control = ControlClient(a["control"], timeout_s=5.0)
    try:
        out["control"] = _refusal(lambda: control.call("status"))
    finally:
        control.close()
    return out


COMMANDS = {"produce": produce, "healthy": healthy, "stats": stats, "http": http, "unsigned": unsigned}

if __name__ == "__main__":
    print(json.dumps(COMMANDS[sys.argv[1]](json.loads(sys.argv[2])), default=str))
