"""bench/startup.py's per-process figures: a snippet's peak RSS is its own (not the bigger parent's
it forked from), and grows with what it allocates."""

from __future__ import annotations

import pytest

from bench.startup import run_snippet

pytestmark = pytest.mark.process


def test_a_snippets_peak_rss_is_its_own() -> None:
    ballast = b"x" * (300 << 20)  # written, so resident: this process is bigger than any snippet below
    small, big = run_snippet("pass"), run_snippet("import os\nx = os.urandom(64 << 20)")
    assert small["rss_mb"] < 100 < len(ballast) >> 20
    assert big["rss_mb"] > small["rss_mb"] + 60
    assert big["cpu_s"] > 0 and big["wall_s"] > 0
