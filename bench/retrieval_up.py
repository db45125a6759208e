"""One run of ``bench/retrieval.py``: `streamrec up --replay` of the train part, then the holdout's
queries to the service it started, as a user would run and ask it.

`up` replays the file (time order, embedded broker) into 2 trainers and 2 shards; once a
committed pass's offsets cover every record of the file, this waits for a bundle of that pass
or a later one to be served, then asks ``/v1/recommend`` for each holdout user (their id and
attributes as raw field values, ``exclude_values``: their train items; for the ablations once more with
``popularity_weight`` 0, the model's own scores), ``/v1/predict`` for every
holdout event, and ``/v1/items/{id}/similar?raw=true`` for the train items (is each one in the
index?). Then it stops `up` (SIGINT; no final pass).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench import REPO
from bench.chaos_parts import PassWatcher
from bench.retrieval_data import Split, holdout_user_fields
from exports.bundle import list_versions, read_manifest
from launcher.launch import free_ports

ID_MASK = (1 << 56) - 1  # an int-hashed field's value is its feature id's low 56 bits
_TICK_S = 0.5


@dataclass
class UpResult:
    lists: dict[int, list[int]] = field(default_factory=dict)  # as served (the service's popularity prior too)
    # each user's top ``wide`` (ids, scores) of the model alone (popularity_weight 0), for the ablations that
    # re-rank them (bench.retrieval_ablation); its first k: the model's own lists
    scored: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    model_lists: dict[int, list[int]] = field(default_factory=dict)
    predict_scores: np.ndarray | None = None
    latencies_ms: list[float] = field(default_factory=list)
    # the same k requests with popularity_weight 0, asked right after each served one (what the prior costs)
    model_latencies_ms: list[float] = field(default_factory=list)
    items_in_index: int = 0
    items_checked: int = 0
    train_seconds: float = 0.0  # `up` start -> every record behind a committed pass
    records_per_s: float = 0.0
    served_version: int | None = None
    # the popularity prior's weight the job chose for the served bundle (trainer.prior_weight); None: none chosen
    prior_weight: float | None = None
    index_size: int | None = None  # items in the served index (/admin/status)
    errors: list[str] = field(default_factory=list)
    log: str = ""


class Api:
    """A keep-alive JSON client for the service on 127.0.0.1."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


class UpRun:
    def __init__(self, name: str, config: dict[str, Any], train_file: Path, n_train: int, *,
                 timeout_s: float, stall_s: float) -> None:
        self.name, self.config, self.train_file, self.n_train = name, config, train_file, n_train
        self.timeout_s, self.stall_s = timeout_s, stall_s
        self.base = Path(tempfile.mkdtemp(prefix=f"streamrec-retrieval-{name.replace('+', '-')}-"))
        self.run_dir = self.base / "run"
        self.log = self.base / "up.log"
        (self.port,) = free_ports(1)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        path = self.base / "streamrec.yaml"
        path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        argv = [sys.executable, "-m", "cli", "up", "--plain", "--config", str(path), "--run-dir",
                str(self.run_dir), "--port", str(self.port), "--replay", str(self.train_file),
                "--replay-format", "json"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=REPO)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def _alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise RuntimeError(f"{self.name}: streamrec up exited ({code}); see {self.log}")

    def wait_trained(self) -> tuple[int, float]:
        """Block until a committed pass covers every record; (its pass id, seconds since start)."""
        started = time.monotonic()
        watcher = PassWatcher(self.run_dir / "checkpoints")
        last, moved = 0, started  # a run whose trainers never commit a readable pass stalls too
        while True:
            self._alive()
            time.sleep(_TICK_S)
            watcher.poll()
            newest = watcher.newest
            now = time.monotonic()
            if newest is not None and newest.consumed >= self.n_train:
                return newest.pass_id, now - started
            total = newest.records_total if newest else 0
            if total != last:
                last, moved = total, now
            if now - started > self.timeout_s or now - moved > self.stall_s:
                raise RuntimeError(f"{self.name}: {total} of {self.n_train} records trained after "
                                   f"{now - started:.0f} s; see {self.log}")

    def wait_served(self, api: Api, pass_id: int) -> int:
        """Block until the service serves a bundle of ``pass_id`` or later; its version."""
        exports = self.run_dir / "exports"
        deadline = time.monotonic() + 300
        want: int | None = None
        while time.monotonic() < deadline:
            self._alive()
            if want is None:
                for v in reversed(list_versions(exports) if exports.is_dir() else []):
                    if read_manifest(exports, v).pass_id >= pass_id:
                        want = v
                        break
            if want is not None:
                try:
                    status, body = api.call("GET", "/readyz")
                except OSError:
                    status, body = 0, None
                if status == 200 and body and int(body.get("version", -1)) >= want:
                    return int(body["version"])
            time.sleep(_TICK_S)
        raise RuntimeError(f"{self.name}: no bundle of pass {pass_id} served within 300 s; see {self.log}")


def run_up(name: str, config: dict[str, Any], train_file: Path, split: Split, *, k: int = 10,
            timeout_s: float = 1800.0, stall_s: float = 240.0, index_sample: int = 2000, seed: int = 0,
            wide: int = 0) -> UpResult:
    """One `up --replay` run of ``train_file`` and the holdout's queries; ``wide``: also keep each user's top
    ``wide`` with their scores (``UpResult.scored``), its first ``k`` the list scored."""
    run = UpRun(name, config, train_file, len(split.train), timeout_s=timeout_s, stall_s=stall_s)
    result = UpResult(log=str(run.log))
    run.start()
    api = Api(run.port)
    try:
        pass_id, result.train_seconds = run.wait_trained()
        result.records_per_s = len(split.train) / result.train_seconds
        result.served_version = run.wait_served(api, pass_id)
        chosen = read_manifest(run.run_dir / "exports", result.served_version).popularity_weight
        result.prior_weight = None if chosen is None else float(chosen["weight"])
        _recommend(api, split, k, result, wide)
        _predict(api, split, result)
        _index(api, split, index_sample, seed, result)
        token = (run.run_dir / "admin-token").read_text().strip() if (run.run_dir / "admin-token").exists() else None
        status, body = api.call("GET", "/admin/status", token=token)
        if status == 200 and isinstance(body, dict):
            result.index_size = _find(body, "items")
    finally:
        api.close()
        run.stop()
    return result


def _recommend(api: Api, split: Split, k: int, result: UpResult, wide: int = 0) -> None:
    """Each holdout user's list as served and the same request without the popularity prior (both timed, each
    first in turn); ``wide``: also the model's own top ``wide`` with their scores."""
    users = sorted(split.truth)
    if users:  # one untimed request of each kind first: the service's first requests load what later ones reuse
        warm = {"user": holdout_user_fields(split, users[0]), "k": k}
        api.call("POST", "/v1/recommend", warm)
        api.call("POST", "/v1/recommend", {**warm, "popularity_weight": 0.0})
    for i, user in enumerate(users):
        body = {"user": holdout_user_fields(split, user), "k": k, "exclude_values": sorted(split.seen.get(user, ()))}
        for served in (True, False) if i % 2 == 0 else (False, True):
            t = time.perf_counter()
            status, answer = api.call("POST", "/v1/recommend", body if served else {**body, "popularity_weight": 0.0})
            (result.latencies_ms if served else result.model_latencies_ms).append(1000.0 * (time.perf_counter() - t))
            if status != 200:
                result.errors.append(f"recommend {user}{'' if served else ' (no prior)'}: {status} {answer}")
            else:
                (result.lists if served else result.model_lists)[user] = [int(it["id"]) & ID_MASK
                                                                          for it in answer["items"]]
        if not wide:
            continue
        status, answer = api.call("POST", "/v1/recommend", {**body, "k": max(k, wide), "popularity_weight": 0.0})
        if status != 200:
            result.errors.append(f"recommend {user} (model alone): {status} {answer}")
            continue
        ids = [int(it["id"]) & ID_MASK for it in answer["items"]]
        result.model_lists[user] = ids[:k]
        result.scored[user] = (np.array(ids, np.int64), np.array([it["score"] for it in answer["items"]]))


def _predict(api: Api, split: Split, result: UpResult) -> None:
    test = split.test
    scores = np.full(len(test), np.nan)
    for a in range(0, len(test), 1000):
        instances = []
        for i in range(a, min(a + 1000, len(test))):
            rec = test.record(i)
            del rec["label"], rec["timestamp"]
            instances.append(rec)
        status, answer = api.call("POST", "/v1/predict", {"instances": instances})
        if status != 200:
            result.errors.append(f"predict [{a}:{a + len(instances)}]: {status} {answer}")
            continue
        scores[a:a + len(instances)] = answer["scores"]
    result.predict_scores = scores


def _index(api: Api, split: Split, sample: int, seed: int, result: UpResult) -> None:
    items = split.catalogue
    if len(items) > sample:
        items = np.sort(np.random.default_rng(seed).choice(items, sample, replace=False))
    for item in items.tolist():
        status, _ = api.call("GET", f"/v1/items/{item}/similar?k=1&raw=true")
        result.items_checked += 1
        result.items_in_index += status == 200


def _find(body: dict[str, Any], key: str) -> int | None:
    """``key``'s integer value in ``body`` or one level down (the status nests the model store's)."""
    if isinstance(body.get(key), int):
        return int(body[key])
    for value in body.values():
        if isinstance(value, dict) and isinstance(value.get(key), int):
            return int(value[key])
    return None
