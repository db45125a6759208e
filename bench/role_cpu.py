"""CPU time of each process of a `streamrec up` run over a window, by role (Linux /proc).

bench/freshness.py reports it beside the records/s trained, so a run that does not keep up says
which process was saturated: on a loaded 2-core machine each runnable process gets its share
of the cores, and a role's CPU seconds per record trained is what decides how far it goes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")
ROLES = (("tansu", "broker"), ("cli.main train", "trainer"), ("cli.main shard", "shard"),
         ("cli.main serve", "service"), ("cli.main generate", "generator"), ("bench.rate_source", "source"),
         ("bench.http_load", "serve load"), ("cli.main up", "up"))


@dataclass(frozen=True)
class Sample:
    """CPU seconds (user + system) of each process, with its role, at one time."""

    cpu_s: dict[int, tuple[str, float]]


def role_of(cmdline: str) -> str | None:
    return next((role for needle, role in ROLES if needle in cmdline), None)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    return kids


def sample(roots: list[int]) -> Sample:
    """The CPU seconds of ``roots`` and all their descendants that have a role."""
    kids, todo, out = _children(), list(roots), {}
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                role = role_of(f.read().replace(b"\0", b" ").decode(errors="replace"))
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if role is not None:
            out[pid] = (role, (int(fields[11]) + int(fields[12])) / _TICK)
    return Sample(out)


def usage(a: Sample, b: Sample, seconds: float) -> dict[str, list[float]]:
    """Per role, each process's share of one core between ``a`` and ``b`` (%), largest first."""
    out: dict[str, list[float]] = {}
    for pid, (role, cpu) in b.cpu_s.items():
        if pid in a.cpu_s:
            out.setdefault(role, []).append(round(100 * (cpu - a.cpu_s[pid][1]) / seconds, 1))
    return {role: sorted(v, reverse=True) for role, v in out.items()}
