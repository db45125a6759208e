"""Where the roles of a `streamrec up` run serve Prometheus metrics, told once and written down.

Every shard and trainer serves ``/metrics`` on a free port `up` picks
(:attr:`launcher.launch.LaunchSpec.metrics_ports`), the service on its API port. `up` prints
them in one line at start and writes them into the run directory as a Prometheus ``file_sd``
targets file, so a local Prometheus scrapes the run with::

    scrape_configs:
      - job_name: streamrec
        file_sd_configs: [{files: [<run_dir>/prometheus_targets.json]}]

Each target's labels set ``job`` (``streamrec-shard``, ``streamrec-trainer``, ``streamrec-api``: the
job names of deploy/prometheus.yml, which deploy/prometheus/alerts.yml expects; a target's labels
take precedence over the scrape config's job name) and ``role`` (``server.0``, ``worker.1``, ``service``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TARGETS_FILE = "prometheus_targets.json"
JOBS = {"server": "streamrec-shard", "worker": "streamrec-trainer", "service": "streamrec-api"}


def scrape_address(host: str, port: int) -> str:
    """``host:port`` to scrape a server bound on ``host`` from this machine (a wildcard: loopback)."""
    if host in ("0.0.0.0", "", "*"):
        host = "127.0.0.1"
    elif host == "::" or ":" in host:
        host = "[::1]" if host == "::" else f"[{host.strip('[]')}]"
    return f"{host}:{port}"


def file_sd_targets(addresses: Mapping[str, str]) -> list[dict[str, Any]]:
    """One ``file_sd`` target group per role (role name -> ``host:port``)."""
    return [{"targets": [address], "labels": {"job": JOBS[role.split(".", 1)[0]], "role": role}}
            for role, address in addresses.items()]


def write_targets(run_root: Path, addresses: Mapping[str, str]) -> Path:
    """``<run_root>/prometheus_targets.json``, replaced whole: Prometheus re-reads the file when it
    changes and must never see half of it."""
    path = run_root / TARGETS_FILE
    partial = path.with_name(f".{TARGETS_FILE}.partial")
    partial.write_text(json.dumps(file_sd_targets(addresses), indent=2) + "\n")
    os.replace(partial, path)
    return path


def announce(run_root: Path, addresses: Mapping[str, str]) -> str:
    """Write the targets file; the line that tells where each role's ``/metrics`` is."""
    path = write_targets(run_root, addresses)
    where = ", ".join(f"{role} {address}" for role, address in addresses.items())
    return f"metrics (/metrics): {where}; Prometheus file_sd targets: {path}"
