"""The console's live line (launcher.up_watch.live_line): the freshness of every live artifact,
receipt -> served, from /admin/status; nothing without a live path."""

from __future__ import annotations

from launcher.up_watch import live_line


def test_the_live_line_shows_rows_items_and_history_freshness() -> None:
    status = {"live": {"state": "live", "item_freshness_p50_s": 0.5, "item_freshness_p95_s": 1.25,
                       "items_refreshed": 1234,
                       "rows": {"row_freshness_p50_s": 0.08, "row_freshness_p95_s": 0.125}},
              "job": {"status": {"history_freshness_p50_s": 0.01, "history_freshness_p95_s": 0.02}}}
    assert live_line(status) == ("live: on, rows p50 0.08 s p95 0.12 s, items p50 0.50 s p95 1.25 s, "
                                 "1,234 refreshed, history p50 0.01 s p95 0.02 s")
    stopped = {"live": {"state": "stopped", "items_refreshed": 0}}
    assert live_line(stopped) == ("live: stopped until a newer bundle (rollback/restart), items p50 – p95 –, "
                                  "0 refreshed")
    assert live_line({"job": {"status": {}}}) == "" and live_line(None) == ""
