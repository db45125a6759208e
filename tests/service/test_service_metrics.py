"""The service's /metrics: the process and build-info series of every role, HELP text that says
more than the name, and errors counted only where the service failed a request it serves (a
browser's favicon or a crawler's guess is a 404 of no route, not an error)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.prom_scrape import labels, samples


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
    for family in text_string_to_metric_families(text):
        if family.name.startswith("streamrec_"):
            restated = family.name.removeprefix("streamrec_").replace("_", " ")
            assert family.documentation.lower() != restated and len(family.documentation.split()) >= 5, family.name
