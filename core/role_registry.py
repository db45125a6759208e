"""The Prometheus registry every streamrec role starts from: its process, garbage collector and
Python platform metrics, and ``streamrec_build_info``.

Each role keeps a registry of its own (never prometheus_client's process-global one, so tests and
several apps in one process do not share series), which therefore has to register the standard
collectors itself: ``process_*`` (CPU seconds, resident memory, open file descriptors, start time,
the last of which shows restarts), ``python_gc_*`` and ``python_info``.
"""

from __future__ import annotations

import importlib.metadata
import platform

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

BUILD_INFO = "streamrec_build_info"
_LIBRARIES = ("numpy", "numba", "pyzmq")  # whose versions change what a role computes or how it talks


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class _BuildInfo(Collector):
    """``streamrec_build_info`` (always 1): what runs, in its labels, to join onto other series."""

    def __init__(self, role: str) -> None:
        self.labels = {"role": role, "version": _version("streamrec"), "python": platform.python_version(),
                       **{lib: _version(lib) for lib in _LIBRARIES}}

    def collect(self) -> list[Metric]:
        family = GaugeMetricFamily(BUILD_INFO, "Always 1; its labels say which streamrec version, Python and "
                                   "numeric libraries this role runs (changes only on a new deployment).",
                                   labels=tuple(self.labels))
        family.add_metric(tuple(self.labels.values()), 1.0)
        return [family]


def role_registry(role: str) -> CollectorRegistry:
    """A new registry for ``role`` (``shard``, ``trainer``, ``service``) holding the process, GC and
    platform collectors and the build info; the role registers its own collectors on it."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    registry.register(_BuildInfo(role))
    return registry
