"""What `streamrec up` does while the system runs: show its state until a role fails (exit 1) or
the user stops it (Ctrl-C / SIGTERM set the request the loop waits on: :mod:`launcher.up_stop`).
Every turn restarts the roles of `up`'s own that died (:meth:`launcher.up_roles.UpRoles.tend`);
the roles' states show their restarts and last exit codes.

On a terminal, a live rich console redrawn every ``up.console_refresh_s``; elsewhere (tests,
`--plain`, a pipe) one progress line every 10 s. Either way the roles are checked every turn.
Both show the service's live path (service.live_items) when it runs: its state and the p50/p95
freshness of item vectors (push -> index).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from launcher.up_roles import UpRoles
from launcher.up_status import StatusCollector
from launcher.up_stop import StopRequest

_PLAIN_EVERY_S = 10.0
_PLAIN_POLL_S = 0.2


@dataclass(frozen=True)
class Watch:
    """What the loop watches and where it reports."""

    roles: UpRoles
    collector: StatusCollector
    out: IO[str]
    say: Callable[[str], None]
    stop: StopRequest


def live_line(status: dict[str, Any] | None) -> str:
    """``live: on, rows p50 0.08 s p95 0.12 s, items p50 0.21 s p95 0.40 s, 1,234 refreshed, history
    p50 0.01 s p95 0.02 s`` from /admin/status (receipt -> served); '' without a live path."""
    live = (status or {}).get("live")
    if not live:
        return ""

    def sec(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f} s"

    state = "on" if live.get("state") == "live" else "stopped until a newer bundle (rollback/restart)"
    rows = live.get("rows") or {}
    row_part = (f"rows p50 {sec(rows.get('row_freshness_p50_s'))} p95 {sec(rows.get('row_freshness_p95_s'))}, "
                if rows else "")
    # the user history the service reads live is as fresh as the trainers' writes of it
    job = ((status or {}).get("job") or {}).get("status") or {}
    history = (f", history p50 {sec(job['history_freshness_p50_s'])} p95 {sec(job.get('history_freshness_p95_s'))}"
               if job.get("history_freshness_p50_s") is not None else "")
    return (f"live: {state}, {row_part}items p50 {sec(live.get('item_freshness_p50_s'))} "
            f"p95 {sec(live.get('item_freshness_p95_s'))}, {live.get('items_refreshed', 0):,} refreshed{history}")


def watch_live(w: Watch, *, run_dir: str, started: float, refresh_s: float) -> int:
    """The live console; returns 1 once a role failed, 0 once a stop was asked for."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.text import Text

    from launcher.console import render

    with Live(console=Console(file=w.out), refresh_per_second=2, transient=False) as live:
        while True:
            snap = w.collector.collect()
            snap.roles = w.roles.states()
            extra = live_line(w.collector.admin_status())
            view = render(snap, run_dir=run_dir, started=started)
            live.update(Group(view, Text(extra)) if extra else view)
            reason = w.roles.tend(w.say)
            if reason:
                w.say(f"failed: {reason}")
                return 1
            if w.stop.wait(refresh_s):
                return 0


def _restarted(roles: UpRoles) -> str:
    """`` restarted: server.1 running (restart 1, last exit -9)`` for roles restarted so far."""
    states = [f"{name} {state}" for name, state in roles.states().items() if "restart" in state]
    return "  restarted: " + ", ".join(states) if states else ""


def watch_plain(w: Watch) -> int:
    """Progress lines; returns 1 once a role failed, 0 once a stop was asked for."""
    from launcher.console import plain_line

    last = 0.0
    while True:
        reason = w.roles.tend(w.say)
        if reason:
            w.say(f"failed: {reason}")
            return 1
        if time.monotonic() - last >= _PLAIN_EVERY_S:
            snap = w.collector.collect()
            extra = live_line(w.collector.admin_status())
            w.say(plain_line(snap) + (f"  {extra}" if extra else "") + _restarted(w.roles))
            last = time.monotonic()
        if w.stop.wait(_PLAIN_POLL_S):
            return 0
