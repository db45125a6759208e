"""core.role_registry: every role's registry carries the process, GC and platform collectors and
streamrec_build_info, and two registries in one process do not share or clash."""

from __future__ import annotations

import importlib.metadata
import platform

from prometheus_client import generate_latest

from core.role_registry import BUILD_INFO, role_registry
from tests.prom_scrape import samples


def test_a_role_registry_has_process_gc_platform_and_build_info() -> None:
    page = generate_latest(role_registry("shard")).decode()
    names = {name for name, _ in samples(page)}
    assert {"process_start_time_seconds", "process_cpu_seconds_total", "process_resident_memory_bytes",
            "process_open_fds", "python_gc_collections_total", "python_info"} <= names
    (info,) = [dict(key) for name, key in samples(page) if name == BUILD_INFO]
    assert info["role"] == "shard" and info["python"] == platform.python_version()
    assert info["version"] == importlib.metadata.version("streamrec")
    assert samples(page)[(BUILD_INFO, tuple(sorted(info.items())))] == 1.0


def test_registries_of_two_roles_in_one_process_are_independent() -> None:
    first, second = role_registry("service"), role_registry("trainer")
    assert "role=\"service\"" in generate_latest(first).decode()
    assert "role=\"trainer\"" in generate_latest(second).decode()
