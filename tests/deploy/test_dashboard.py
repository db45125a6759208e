"""The dashboard at / draws charts from the service's real /metrics and /admin/status,
checked in headless Chromium; the job behind the admin API is a stub on the real control channel."""

from __future__ import annotations

import itertools
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from jobcontrol.channel import ControlServer
from ps.launcher import free_ports
from service.app import create_app
from service.settings import ServiceSettings

from .headless_chromium import LINE_RGB, chart_boxes, count_color, ensure_chromium, screenshot

TOKEN = "dashboard-test-token-0123456789"


class StubJob:
    """Answers status with moving numbers, like a training job would."""

    def __init__(self) -> None:
        self._calls = itertools.count()

    def status(self) -> dict[str, Any]:
        n = next(self._calls)
        return {"records": 1000 * n, "records_per_s": 400.0 + 10 * n, "auc": 0.6 + 0.01 * (n % 10),
                "lag": 50 + n, "tables": {"emb8": {"rows": 1000 + 100 * n, "bytes": 64_000 + 6400 * n}},
                "freshness_s": 2.0 + 0.1 * n}

    def passes(self) -> list[dict[str, Any]]:
        return [{"pass": 1, "created_at": 1000.0, "records_total": 4000},
                {"pass": 2, "created_at": 1010.0, "records_total": 8000}]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[str]:
    job = ControlServer(StubJob()).start()  # type: ignore[arg-type]
    (port,) = free_ports(1)
    settings = ServiceSettings(exports_dir=str(tmp_path / "exports"), port=port, job_control=job.endpoint,
                               admin_token=TOKEN)
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "service did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        job.stop()


def test_dashboard_is_plain_html_without_external_resources(service: str) -> None:
    with urllib.request.urlopen(service + "/", timeout=10) as r:
        assert r.headers["content-type"].startswith("text/html")
        page = r.read().decode()
    assert "<canvas" in page and "/metrics" in page and "/admin/status" in page
    assert "http://" not in page.replace("http://127.0.0.1", "") and "https://" not in page  # no CDN


def test_dashboard_charts_draw_data_in_headless_chromium(service: str, tmp_path: Path) -> None:
    png = screenshot(ensure_chromium(), f"{service}/#token={TOKEN}", tmp_path / "dashboard.png")
    drawn = {name: count_color(png, box, LINE_RGB) for name, box in chart_boxes().items()}
    assert all(n > 20 for n in drawn.values()), f"charts without data (line pixels per chart): {drawn}"


def test_without_a_token_the_job_charts_stay_empty(service: str, tmp_path: Path) -> None:
    png = screenshot(ensure_chromium(), f"{service}/", tmp_path / "no-token.png")
    drawn = {name: count_color(png, box, LINE_RGB) for name, box in chart_boxes().items()}
    assert drawn["rate"] == 0 and drawn["rows"] == 0  # admin data needs the token
