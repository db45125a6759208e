"""The service's /metrics: the process and build-info series of every role, HELP text that says
more than the name, and errors counted only where the service failed a request it serves (a
browser's favicon or a crawler's guess is a 404 of no route, not an error); the service's own
dashboard charts only metrics the service exports."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from service.metric_help import HELP
from tests.prom_scrape import assert_help_explains, labels, samples


def _errors(client: TestClient) -> dict[str, float]:
    return {dict(key)["code"]: value for (name, key), value in samples(client.get("/metrics").text).items()
            if name == "streamrec_errors_total"}


def test_unrouted_404s_are_not_errors_but_a_routed_not_found_is(client: TestClient) -> None:
    for path in ("/favicon.ico", "/apple-touch-icon.png", "/robots.txt", "/no/such/page"):
        assert client.get(path).status_code == 404
    assert _errors(client).get("not_found", 0) == 0
    page = samples(client.get("/metrics").text)
    assert page[("streamrec_request_seconds_count", labels(route="<unmatched>", method="GET", status="404"))] == 4
    assert client.get("/v1/embeddings/no_such_slot/1").status_code == 404  # a route that found nothing
    assert _errors(client)["not_found"] == 1


def test_metrics_have_process_and_build_info_and_help_that_explains(client: TestClient) -> None:
    text = client.get("/metrics").text
    names = {name for name, _ in samples(text)}
    assert {"process_start_time_seconds", "process_resident_memory_bytes", "python_gc_collections_total",
            "streamrec_build_info"} <= names
    assert ("streamrec_build_info", "service") in {(n, dict(k).get("role")) for n, k in samples(text)}
    assert_help_explains(text)


def test_the_console_charts_only_metrics_the_service_exports() -> None:
    """Its charts read /metrics samples by name; a name the service never exports draws nothing."""
    page = (Path(__file__).resolve().parents[2] / "service" / "static" / "index.html").read_text()
    # a counter is charted by its sample's name, <name>_total
    charted = {re.sub("_total$", "", name) for name in re.findall(r"\bstreamrec_[a-z0-9_]+", page)}
    assert charted and charted <= {f"streamrec_{name}" for name in HELP}, charted - {f"streamrec_{n}" for n in HELP}
