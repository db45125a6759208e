"""Table policies from the root YAML reach the shards `streamrec up` starts: admission (a count
threshold), a per-slot ttl, a shard byte budget and show/click decay each take effect on the
running shards and are shown by the admin API with the YAML as their source; and the start is
quiet: no shard logs a refused request, while a request signed with another secret is still
refused with a warning and counted."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import Forbidden
from launcher.launch import free_ports
from ps.auth import read_secret
from ps.client import PSClient

from .conftest import SMALL_UP
from .test_up_e2e import Up

pytestmark = pytest.mark.process

SHARD_BYTES = 400_000  # small enough that the generator's ids fill it within a few passes
POLICIES = {
    "shard": {"max_bytes": SHARD_BYTES},
    "tables": {
        "default": {"admission": {"policy": "count", "min_count": 2, "sketch_width": 4096, "sketch_depth": 2},
                    "show_click_decay": 0.9},
        "item_id": {"eviction": {"ttl_passes": 1}},  # a slot: it gets a table of its own, emb8.item_id
    },
}
REFUSED = "refused a request"


@pytest.fixture
def policy_up(tmp_path: Path) -> Iterator[Up]:
    config = tmp_path / "streamrec.yaml"
    train = {**SMALL_UP["train"], "passes": {**SMALL_UP["train"]["passes"], "base_every": 2}}  # a shrink every 2
    up_section = {**SMALL_UP["up"], "generator": {"rate": 300}}
    config.write_text(yaml.safe_dump({**SMALL_UP, "train": train, "up": up_section, "ps": POLICIES}))
    (port,) = free_ports(1)
    up = Up(tmp_path / "run", config, port)
    yield up
    up.kill()


def shard_client(up: Up, secret: bytes | None = None) -> PSClient:
    said = re.search(r"shards up at (\S+);", up.log.read_text())
    assert said is not None, up.log.read_text()
    endpoints = said.group(1).split(",")
    return PSClient(endpoints, secret=secret or read_secret(up.run_dir / "ps-secret"))


def tables(up: Up) -> list[dict[str, Any]]:
    """Each shard's table stats, by table name."""
    with shard_client(up) as client:
        return [s["tables"] for s in client.admin.stats()]


def refusal_lines(up: Up) -> list[str]:
    return [line for p in sorted((up.run_dir / "logs").glob("server.*.log"))
            for line in p.read_text(errors="replace").splitlines() if REFUSED in line]


def test_up_puts_the_yaml_table_policies_in_force_and_starts_without_refusals(policy_up: Up) -> None:
    up = policy_up
    up.wait_for("shards up", lambda: "shards up at" in up.log.read_text())

    def took_effect() -> bool:
        shards = tables(up)
        return all(s["emb8"]["not_admitted"] > 0 and s["emb8.item_id"]["evicted"] > 0
                   and s["emb8"]["evicted_by_budget"] + s["emb8"]["refused_by_budget"] > 0
                   and s.get("ids.items", {}).get("evicted", 0) > 0 for s in shards)  # the trainers' item ttl too

    up.wait_for("admission, the item ttl and the budget at work on every shard", took_effect)
    for shard in tables(up):
        assert shard["emb8"]["evicted"] == 0  # the ttl is the item slot's alone
        assert all(t["max_bytes"] is not None and t["max_bytes"] < SHARD_BYTES for t in shard.values())  # shares
        # the shared table, full, holds its share (a ttl's tombstones may outgrow a share until the next write)
        assert shard["emb8"]["bytes"] <= shard["emb8"]["max_bytes"], shard["emb8"]

    item = up.get("/admin/tables/emb8.item_id/policy", admin=True)
    assert item["eviction"]["ttl_passes"] == 1 and item["admission"]["policy"] == "count"
    assert item["show_click_decay"] == 0.9
    assert set(item["source"].values()) == {"yaml"}
    shared = up.get("/admin/tables/emb8/policy", admin=True)
    assert shared["eviction"]["ttl_passes"] is None and shared["admission"]["min_count"] == 2

    # A quiet start: no shard refused anything the run's own roles sent.
    assert refusal_lines(up) == [], refusal_lines(up)
    with shard_client(up) as client:
        before = [s["errors"].get("forbidden", 0) for s in client.admin.stats()]
    # A real refusal still warns and counts: a client with another secret.
    with shard_client(up, secrets.token_hex(32).encode()) as stranger, pytest.raises(Forbidden):
        stranger.admin.health()
    with shard_client(up) as client:
        after = [s["errors"].get("forbidden", 0) for s in client.admin.stats()]
    assert after == [b + 1 for b in before]  # every shard it asked refused it, and counted
    up.wait_for("the refusal logged", lambda: any("signature does not match" in line for line in refusal_lines(up)))
    assert up.ctrl_c() == 0, up.output()
