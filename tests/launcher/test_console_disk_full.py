"""The console says "disk full" when the service's /admin/status does (the trainer waits for space)."""

from __future__ import annotations

from rich.console import Console

from launcher.console import render

from .test_up_status import FakeCollector, _status


def test_the_console_says_disk_full() -> None:
    full = {**_status(3, 1000, 100.0), "disk": {"state": "disk full", "export_free_bytes": 0}}
    c = FakeCollector([_status(3, 1000, 100.0), full])
    assert not c.collect().errors
    snap = c.collect()
    assert snap.last_pass == 3 and any(e.startswith("disk full") for e in snap.errors)
    console = Console(width=120, record=True)
    console.print(render(snap, run_dir="runs/local", started=0.0))
    assert "disk full: training waits for space" in console.export_text()
