"""Resident memory, CPU time and age of this process and of others on this machine (from /proc)."""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM, which starts over at exec (ru_maxrss does not: a child
    forked from a big parent would report the parent's size)."""
    import os

    own = process_peak_rss_mb(os.getpid())
    return own if own > 0 else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def process_peak_rss_mb(pid: int) -> float:
    """Peak RSS (VmHWM) of a running process; 0 when it is gone or unreadable."""
    return _status_mb(pid, "VmHWM:") or 0.0


def rss_mb() -> float | None:
    """This process's resident memory now (VmRSS); None where /proc is missing."""
    import os

    return _status_mb(os.getpid(), "VmRSS:")


def _status_mb(pid: int, key: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process; 0 when unreadable."""
    import os

    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def process_age_s() -> float | None:
    """Seconds since this process started (exec'd python included, to the kernel's clock tick);
    None where /proc is missing."""
    import os
    import time

    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
