"""core.metrics_http: a role's registry on /metrics, off at port 0, and a client that holds a
connection without sending its request does not hold the server (one request at a time, each
with a socket timeout)."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from core.metrics_http import MetricsConfig, MetricsServer, endpoint_host, serve_metrics


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    Counter("streamrec_test_things", "things", registry=registry).inc(3)
    return registry


def test_port_zero_is_off_and_a_cli_port_overrides_the_config() -> None:
    assert serve_metrics(_registry(), MetricsConfig(), default_host="127.0.0.1") is None
    assert serve_metrics(_registry(), MetricsConfig(port=9), port=0, default_host="127.0.0.1") is None


@pytest.mark.slow
def test_a_silent_connection_does_not_hold_the_server() -> None:
    with MetricsServer(_registry(), host="127.0.0.1", port=0).start() as server:
        url = f"http://127.0.0.1:{server.port}/metrics"
        silent = socket.create_connection(("127.0.0.1", server.port))  # sends nothing: dropped after the timeout
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                assert b"streamrec_test_things_total 3.0" in response.read()
        finally:
            silent.close()


def test_the_bind_host_of_a_zeromq_endpoint() -> None:
    assert endpoint_host("tcp://0.0.0.0:7100") == "0.0.0.0"
    assert endpoint_host("tcp://*:7100") == "0.0.0.0"
    assert endpoint_host("tcp://127.0.0.1:0") == "127.0.0.1"
    assert endpoint_host("tcp://[::1]:7100") == "::1"
