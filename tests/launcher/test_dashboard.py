"""The dashboard at / draws the run's learning curve from the service's real /admin/passes?since=
(and /metrics, /admin/status), checked in headless Chromium: its lines, axes with ticks and units,
a colour key, one time window for every chart, the Bayes-optimal AUC when known, and an "off"
state for a feature that is off. The job behind the admin API is a stub on the real control
channel that holds a history of passes, as a chief does after a run."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from jobcontrol.channel import ControlServer
from launcher.launch import free_ports
from service.app import create_app
from service.settings import ServiceSettings

from .headless_chromium import (
    CHART_IDS,
    LINE_RGB,
    REF_RGB,
    SECOND_LINE_RGB,
    TEXT_RGB,
    chart_boxes,
    count_color,
    ensure_chromium,
    page_dom,
    screenshot,
    title_boxes,
    y_axis_boxes,
)

pytestmark = pytest.mark.process

TOKEN = "dashboard-test-token-0123456789"


N_POINTS = 40
START = time.time() - 30 * (N_POINTS + 1)  # a run of the last 20 minutes, as the live samples are now


def _point(n: int) -> dict[str, Any]:
    return {"pass": n, "time": START + 30 * n, "records": 1000, "records_total": 1000 * n,
            "records_per_s": 400.0 + 10 * (n % 7), "auc": 0.6 + 0.01 * (n % 10), "auc_total": 0.6 + 0.002 * n,
            "logloss": 0.5, "logloss_total": 0.5, "lag": 50 + n, "freshness_s": 2.0 + 0.1 * (n % 5),
            "rows": 1000 + 100 * n, "table_bytes": 64_000 + 6400 * n, "rss_mb": 300.0 + n,
            "disk_rows": 600 + 90 * n, "ram_hit_rate": 0.8 + 0.004 * (n % 10)}


class StubJob:
    """A job whose stream idles after a run: its status and passes no longer move; the learning
    curve is all in the history it serves (as trainer.job_control serves trainer.pass_history)."""

    def __init__(self) -> None:
        self.points = [_point(n) for n in range(1, N_POINTS + 1)]
        self.history_calls: list[int] = []
        self.bayes_auc: float | None = None  # what a job that knows its data's Bayes-optimal AUC reports

    def status(self) -> dict[str, Any]:
        last = self.points[-1]
        out = {"pass": last["pass"], "progressive": {"auc": None}, "auc": last["auc_total"], "last_point": last}
        if self.bayes_auc is not None:
            out["bayes_auc"] = self.bayes_auc
        return out

    def passes(self) -> list[dict[str, Any]]:
        return [{"pass": p["pass"], "created_at": p["time"], "records_total": p["records_total"]}
                for p in self.points[-3:]]

    def history(self, since: int = -1) -> dict[str, Any]:
        self.history_calls.append(since)
        return {"since": since, "keep": 10_000, "points": [p for p in self.points if p["pass"] > since]}


@pytest.fixture
def stub() -> StubJob:
    return StubJob()


@pytest.fixture
def service(tmp_path: Path, stub: StubJob) -> Iterator[str]:
    job = ControlServer(stub).start()
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


def test_admin_passes_keeps_its_list_and_serves_the_curve_since_a_pass(service: str) -> None:
    def get(path: str) -> Any:
        req = urllib.request.Request(service + path, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    assert [p["pass"] for p in get("/admin/passes")] == [38, 39, 40]  # the list, as before
    assert [p["pass"] for p in get("/admin/passes?since=37")["points"]] == [38, 39, 40]
    assert len(get("/admin/passes?since=-1")["points"]) == N_POINTS


def test_charts_show_the_runs_history_on_first_load(service: str, stub: StubJob, tmp_path: Path) -> None:
    # a budget shorter than the page's poll interval: what shows is what the first load fetched
    png = screenshot(ensure_chromium(), f"{service}/#token={TOKEN}", tmp_path / "dashboard.png", budget_ms=1500)
    boxes = chart_boxes()
    drawn = {name: count_color(png, box, LINE_RGB) for name, box in boxes.items()}
    # a line through 40 points spans the chart: hundreds of pixels (one live sample would be a dot)
    assert all(n > 300 for n in drawn.values()), f"charts without the run's history (line pixels): {drawn}"
    cumulative = {name: count_color(png, boxes[name], SECOND_LINE_RGB) for name in ("auc", "memory")}
    assert all(n > 300 for n in cumulative.values()), f"second lines missing: {cumulative}"
    assert stub.history_calls[0] == -1  # the whole history first


def test_polling_asks_only_for_passes_after_the_newest_held(service: str, stub: StubJob, tmp_path: Path) -> None:
    screenshot(ensure_chromium(), f"{service}/#token={TOKEN}", tmp_path / "dashboard.png", budget_ms=7000)
    assert stub.history_calls[0] == -1 and len(stub.history_calls) >= 2
    assert set(stub.history_calls[1:]) == {N_POINTS}


def test_without_a_token_the_job_charts_stay_empty(service: str, tmp_path: Path) -> None:
    png = screenshot(ensure_chromium(), f"{service}/", tmp_path / "no-token.png")
    drawn = {name: count_color(png, box, LINE_RGB) for name, box in chart_boxes().items()}
    assert drawn["rate"] == 0 and drawn["rows"] == 0  # admin data needs the token
    charts = charts_drawn(f"{service}/", tmp_path)
    assert charts["rate"]["data-state"] == charts["rows"]["data-state"] == "empty"  # waiting, not off


class _Canvases(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[str, str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if tag == "canvas" and found.get("id", "").startswith("c-"):
            self.charts[found["id"][2:]] = found


def charts_drawn(url: str, tmp_path: Path, budget_ms: int = 1500) -> dict[str, dict[str, str]]:
    """Per chart, what its canvas says it drew: data-state (data, empty, off), data-yticks,
    data-xticks and the aria-label (the off state's text)."""
    parser = _Canvases()
    parser.feed(page_dom(ensure_chromium(), url, tmp_path / "chromium-profile", budget_ms=budget_ms))
    return parser.charts


def test_charts_have_ticks_units_a_colour_key_and_one_time_window(service: str, tmp_path: Path) -> None:
    charts = charts_drawn(f"{service}/#token={TOKEN}", tmp_path)
    drawn = {name: charts[name] for name in CHART_IDS}
    assert all(c["data-state"] == "data" for c in drawn.values()), drawn
    tier = charts["tier"]  # below the screenshot's charts: the hit rate and the share of rows on disk
    assert tier["data-state"] == "data"
    assert "RAM hit rate" in tier["aria-label"] and "rows on disk" in tier["aria-label"]
    for name, c in drawn.items():
        yticks = [float(v.replace(",", "")) for v in c["data-yticks"].split()]
        assert len(yticks) >= 3 and yticks == sorted(yticks), (name, c)
        xticks = c["data-xticks"].split("|")  # clock times, a 20-minute window's at whole minutes
        assert len(xticks) >= 3 and all(re.fullmatch(r"\d\d:\d\d", t) for t in xticks), (name, c)
    # one time window: every chart's time axis is the same, though their series differ
    assert len({c["data-xticks"] for c in drawn.values()}) == 1, drawn

    png = screenshot(ensure_chromium(), f"{service}/#token={TOKEN}", tmp_path / "axes.png", budget_ms=1500)
    # the tick labels' grey text, anti-aliased (the lines, grid and tick marks are other colours)
    labels = {name: count_color(png, box, TEXT_RGB, tol=60) for name, box in y_axis_boxes().items()}
    assert all(n > 80 for n in labels.values()), f"y tick labels missing: {labels}"
    keys = {name: count_color(png, box, LINE_RGB) for name, box in title_boxes().items()}
    assert all(n >= 20 for n in keys.values()), f"colour key missing: {keys}"
    second = {name: count_color(png, title_boxes()[name], SECOND_LINE_RGB) for name in ("auc", "memory")}
    assert all(n >= 20 for n in second.values()), f"second line's key missing: {second}"


def test_the_bayes_optimal_auc_is_drawn_when_the_link_or_the_job_gives_it(service: str, stub: StubJob,
                                                                         tmp_path: Path) -> None:
    auc = chart_boxes()["auc"]
    plain = screenshot(ensure_chromium(), f"{service}/#token={TOKEN}", tmp_path / "plain.png", budget_ms=1500)
    assert count_color(plain, auc, REF_RGB) == 0
    linked = screenshot(ensure_chromium(), f"{service}/#token={TOKEN}&bayes_auc=0.78", tmp_path / "linked.png",
                        budget_ms=1500)
    assert count_color(linked, auc, REF_RGB) > 200  # a dashed line across the chart
    assert count_color(linked, title_boxes()["auc"], REF_RGB) > 0  # and its key
    stub.bayes_auc = 0.9
    reported = charts_drawn(f"{service}/#token={TOKEN}", tmp_path)["auc"]
    assert float(reported["data-yticks"].split()[-1]) >= 0.9  # the axis reaches the reference


def test_a_feature_that_is_off_says_so(service: str, stub: StubJob, tmp_path: Path) -> None:
    for p in stub.points:
        del p["lag"]  # a job that does not report its consumer lag
        del p["disk_rows"], p["ram_hit_rate"]  # nor has a table with a disk tier
    charts = charts_drawn(f"{service}/#token={TOKEN}", tmp_path)
    off = {name: c["aria-label"] for name, c in charts.items() if c["data-state"] == "off"}
    assert off == {"lag": "lag: not reported by this job",
                   "live": "live items: off in this service (service.read_through.live_items)",
                   "history": "user history: not reported by this job",
                   "liverows": "live rows: off in this service (service.read_through)",
                   "tier": "disk tier: no table has one"}, charts
    assert charts["rate"]["data-state"] == "data"
