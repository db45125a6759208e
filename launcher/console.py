"""The live console of `streamrec up`: one rich table redrawn from each :class:`Snapshot`."""

from __future__ import annotations

import time

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from launcher.up_status import Snapshot


def _num(v: float | None, fmt: str = "{:,.0f}") -> str:
    return "–" if v is None else fmt.format(v)


def _bytes(n: int | None) -> str:
    if n is None:
        return "–"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


def _auc(snap: Snapshot) -> str:
    """``0.7012 this pass, 0.6890 since start (Bayes-optimal 0.8000)``, parts that are known."""
    out = _num(snap.auc, "{:.4f}") + (" this pass" if snap.auc is not None else "")
    if snap.auc_total is not None:
        out += f", {snap.auc_total:.4f} since start"
    if snap.bayes_auc is not None:
        out += f"   (Bayes-optimal {snap.bayes_auc:.4f})"
    return out


def _counts(counts: dict[str, int]) -> str:
    """``year 90,000, genres 12`` by count, or ``none``."""
    top = sorted(counts.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:,}" for k, v in top) or "none"


def plain_line(snap: Snapshot) -> str:
    """One progress line (no terminal): rounded figures with their units, ``–`` where unknown."""
    return (f"records/s {_num(snap.records_per_s)} (total {_num(snap.records)} records)  "
            f"lag {_num(snap.lag)} records  AUC {_auc(snap)}  rows {_num(snap.rows)} ({_bytes(snap.table_bytes)})  "
            f"pass {_num(snap.last_pass)}  export {_num(snap.last_export)}  "
            f"freshness {_num(snap.freshness_s, '{:.1f} s')}")


def render(snap: Snapshot, *, run_dir: str, started: float) -> Panel:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    auc = _auc(snap)
    rows = [
        ("records/s", _num(snap.records_per_s, "{:,.0f}") + f"   total {_num(snap.records)} records"),
        ("consumer lag", _num(snap.lag) + (" records" if snap.lag is not None else "")),
        ("progressive AUC", auc),
        ("table rows", f"{_num(snap.rows)}   {_bytes(snap.table_bytes)}"),
        ("admitted / evicted", f"{_num(snap.admitted)} / {_num(snap.evicted)}"),
        ("last pass", _num(snap.last_pass)),
        ("last export", _num(snap.last_export) + f"   serving bundle {_num(snap.bundle_version)}"),
        ("freshness", _num(snap.freshness_s, "{:.1f} s")),
        ("records refused", _counts(snap.rejected)),
        ("fields absent", _counts(snap.absent_fields)),
        ("API", f"{snap.api_url}   dashboard {snap.api_url}/"),
        ("logs", f"{run_dir}/logs"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    roles = Text("  ".join(f"{name}: {state}" for name, state in snap.roles.items()), style="dim")
    parts: list[Table | Text] = [t, roles]
    if snap.errors:
        parts.append(Text("; ".join(snap.errors), style="yellow"))
    up_for = time.time() - started
    return Panel(Group(*parts), title=f"streamrec up — {up_for:,.0f} s", subtitle="Ctrl-C: commit a pass and stop")
