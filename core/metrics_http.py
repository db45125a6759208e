"""One role's Prometheus registry served over HTTP (``GET /metrics``) by a small background thread.

Shards and trainers have no web server of their own: each builds a ``CollectorRegistry`` (never
the process-global one) whose collectors read the role's objects when scraped, and serves it
here on ``metrics.port`` (0: off). One request at a time, each with a socket timeout, so a client
that holds a connection open (or many clients) costs a bounded thread and a bounded wait, not a
thread each; scrapes come every few seconds from one Prometheus.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from pydantic import Field

from core.yaml_config import FrozenModel

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 5.0  # a scrape that has not sent its request by then is dropped


class MetricsConfig(FrozenModel):
    """Where a role serves ``/metrics``: ``port`` 0 is off; ``host`` None binds the role's own
    address (a shard's ``--host``, a trainer's control endpoint host)."""

    port: int = Field(0, ge=0, lt=65536, description="Port of the role's Prometheus `/metrics`; 0: off.")
    host: str | None = Field(None,
                             description="Address `/metrics` binds; left out, the role's own (a shard's `--host`, a "
                                         "trainer's control host).")


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S  # socketserver.StreamRequestHandler applies it to the connection

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per scrape would flood the role's log


class _Server(WSGIServer):
    """wsgiref's server, over IPv6 when the host is an IPv6 address."""

    def __init__(self, address: tuple[str, int], handler: type[WSGIRequestHandler]) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


class MetricsServer:
    """Serves ``registry`` on ``http://host:port/metrics`` from :meth:`start` until :meth:`close`
    (``port`` 0 here binds a free port, read back from ``.port``; :func:`serve_metrics` reads 0 as off)."""

    def __init__(self, registry: CollectorRegistry, *, host: str, port: int) -> None:
        from prometheus_client import make_wsgi_app  # here: a role that reads MetricsConfig and serves none skips it

        self._httpd = make_server(host, port, make_wsgi_app(registry), server_class=_Server,
                                  handler_class=_QuietHandler)
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                        name=f"metrics-{self.port}", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", self.host, self.port)
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(registry: CollectorRegistry, config: MetricsConfig, *, port: int | None = None,
                  default_host: str) -> MetricsServer | None:
    """Start serving ``registry`` where ``config`` says (``port``: a CLI override); None when off."""
    chosen = config.port if port is None else port
    if chosen == 0:
        return None
    return MetricsServer(registry, host=config.host or default_host, port=chosen).start()


def endpoint_host(endpoint: str) -> str:
    """The host a ZeroMQ TCP endpoint binds (``tcp://0.0.0.0:7100`` -> ``0.0.0.0``; ``*``: every address)."""
    address = endpoint.split("://", 1)[-1].rsplit(":", 1)[0]
    host = address.strip("[]")
    return "0.0.0.0" if host in ("*", "") else host
