"""For tests: start a real `streamrec shard` serving /metrics, and scrape and check a /metrics page."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from launcher.launch import free_ports

REPO = Path(__file__).resolve().parents[1]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (sample name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def assert_help_explains(page: str) -> None:
    """Every streamrec metric's HELP on ``page`` is a phrase of its own, not its name with spaces."""
    for family in text_string_to_metric_families(page):
        if family.name.startswith("streamrec_"):
            restated = family.name.removeprefix("streamrec_").replace("_", " ")
            assert family.documentation.lower() != restated and len(family.documentation.split()) >= 5, family.name


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    """The labels key of :func:`samples`."""
    return tuple(sorted(values.items()))


def scrape(url: str, timeout_s: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        assert response.status == 200
        return response.read().decode()


def wait_scrape(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 120.0) -> str:
    """The first page ``url`` serves while ``proc`` lives (a slow start on a loaded machine is waited for)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return scrape(url)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no /metrics at {url} (exit {proc.poll()}): "
                                     f"{log.read_text(errors='replace')[-3000:]}") from None
            time.sleep(0.2)


@dataclass
class ShardProcess:
    proc: subprocess.Popen
    endpoint: str
    metrics_url: str
    log: Path


@contextlib.contextmanager
def shard_with_metrics(tmp: Path, ps_yaml: Path, *, index: int = 0) -> Iterator[ShardProcess]:
    """`streamrec shard --metrics-port` on free loopback ports, killed on exit. Others' tests pick
    free ports too: a port taken before the shard binds it is picked again (three tries)."""
    proc = None
    try:
        for attempt in range(3):
            port, metrics_port = free_ports(2)
            log = tmp / f"shard-{index}.{attempt}.log"
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "cli", "shard", "--config", str(ps_yaml), "--index", str(index),
                     "--port", str(port), "--metrics-port", str(metrics_port)],
                    cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    env={**os.environ, "OMP_NUM_THREADS": "1"})
            shard = ShardProcess(proc, f"tcp://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics", log)
            try:
                wait_scrape(shard.metrics_url, proc, log)
            except AssertionError:
                if attempt == 2 or "Address already in use" not in log.read_text(errors="replace"):
                    raise
                _kill(proc)
                continue
            yield shard
            return
    finally:
        if proc is not None:
            _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
