"""The console's snapshot: fields from the admin API's job and bundle status, records/s of all
workers from consecutive pass commits, and a panel that renders with any field missing."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from launcher.console import plain_line, render
from launcher.up_status import Snapshot, StatusCollector, find_number


def _status(pass_id: int, total: int, at: float) -> dict[str, Any]:
    return {"bundle": {"version": pass_id, "freshness_s": 1.5},
            "job": {"status": {"pass": pass_id, "records_total": total, "progressive": {"auc": 0.7},
                               "last_export": {"version": pass_id, "kind": "delta"},
                               "last_commit": {"records_total": total, "created_at": at,
                                               "offsets": {"0": total // 2, "1": total // 2}}}}}


class FakeCollector(StatusCollector):
    def __init__(self, answers: list[dict[str, Any] | None]) -> None:
        super().__init__("http://127.0.0.1:1", "token", None, bayes_auc=0.8, end_offsets=lambda: 5000)
        self.answers = answers

    def admin_status(self, timeout_s: float = 2.0) -> dict[str, Any] | None:
        return self.answers.pop(0)


def test_snapshot_reads_job_and_bundle_and_rates_over_commits() -> None:
    c = FakeCollector([_status(3, 1000, 100.0), _status(3, 1000, 100.0), _status(4, 3000, 104.0)])
    first = c.collect()
    assert (first.last_pass, first.last_export, first.auc, first.freshness_s) == (3, 3, 0.7, 1.5)
    assert first.records_per_s is None and first.lag == 4000  # end offsets - the last pass's offsets
    assert c.collect().records_per_s is None  # the same commit again: no rate yet
    assert c.collect().records_per_s == 500.0  # 2000 records in 4 s, all workers


def test_a_service_not_answering_yet_is_reported_not_fatal() -> None:
    snap = FakeCollector([None]).collect()
    assert snap.errors and snap.auc is None


def test_find_number_searches_breadth_first_and_skips_booleans() -> None:
    assert find_number({"a": {"auc": 0.6}, "auc": True, "b": {"c": {"auc": 0.9}}}, "auc") == 0.6
    assert find_number({"x": "1"}, "x") is None


def test_console_renders_with_every_field_missing() -> None:
    console = Console(width=100, record=True)
    console.print(render(Snapshot(at=0.0, api_url="http://127.0.0.1:8000"), run_dir="runs/local", started=0.0))
    text = console.export_text()
    assert "progressive AUC" in text and "http://127.0.0.1:8000" in text


def test_an_idle_stream_shows_the_last_passes_auc_and_the_cumulative_one() -> None:
    idle = _status(5, 5000, 120.0)
    job = idle["job"]["status"]
    job["progressive"] = {"auc": None}  # the running pass has seen no record
    job["last_commit"]["metrics"] = {"auc": 0.71}
    job["last_point"] = {"pass": 5, "auc": 0.71, "auc_total": 0.6837}
    snap = FakeCollector([idle]).collect()
    assert (snap.auc, snap.auc_total) == (0.71, 0.6837)


def test_the_plain_line_prints_rounded_figures_with_units() -> None:
    snap = Snapshot(at=0.0, api_url="http://127.0.0.1:8000", records=12345.0, records_per_s=502.0267131307615,
                    lag=1500.0, auc=0.5137581234, auc_total=0.50123, bayes_auc=0.8, rows=20000, table_bytes=3 << 20,
                    last_pass=3.0, last_export=3.0, freshness_s=2.345678)
    line = plain_line(snap)
    assert line == ("records/s 502 (total 12,345 records)  lag 1,500 records  "
                    "AUC 0.5138 this pass, 0.5012 since start   (Bayes-optimal 0.8000)  rows 20,000 (3.0 MiB)  "
                    "pass 3  export 3  freshness 2.3 s")
    empty = plain_line(Snapshot(at=0.0, api_url="x"))
    assert "None" not in empty and "records/s – " in empty and "freshness –" in empty
