"""Headless Chromium for dashboard tests: installed from Debian's ``chromium`` package when
missing (tests run as root in CI), and a screenshot helper."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from PIL import Image


def ensure_chromium() -> str:
    """The chromium binary; installs Debian's package first when it is missing (idempotent)."""
    found = shutil.which("chromium")
    if found:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env, stdout=subprocess.DEVNULL)
    found = shutil.which("chromium")
    assert found, "apt-get installed chromium but it is not on PATH"
    return found


def _chromium(binary: str, profile: Path, budget_ms: int, args: list[str], *, stderr: int) -> bytes:
    """Run headless Chromium on ``args`` for ``budget_ms`` of virtual time (timers run, fetches
    complete); its stdout (with ``stderr``: its log too)."""
    argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *args]
    # start_new_session: a hung renderer is killed with its whole group on timeout
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return out


def screenshot(binary: str, url: str, out: Path, *, budget_ms: int = 12_000,
               size: tuple[int, int] = (1200, 900)) -> Path:
    """A PNG of ``url`` after ``budget_ms`` of virtual time."""
    log = _chromium(binary, out.parent / "chromium-profile", budget_ms,
                    ["--force-device-scale-factor=1", f"--screenshot={out}", f"--window-size={size[0]},{size[1]}", url],
                    stderr=subprocess.STDOUT)
    assert out.is_file(), f"chromium wrote no screenshot: {log.decode(errors='replace')[-2000:]}"
    return out


def page_dom(binary: str, url: str, profile: Path, *, budget_ms: int = 12_000) -> str:
    """The page's DOM as its scripts left it after ``budget_ms`` of virtual time."""
    out = _chromium(binary, profile, budget_ms, ["--dump-dom", url], stderr=subprocess.DEVNULL)
    assert b"</html>" in out, f"chromium dumped no page: {out[-2000:]!r}"
    return out.decode()


def count_color(png: Path, box: tuple[int, int, int, int], rgb: tuple[int, int, int], tol: int = 40) -> int:
    """Pixels within ``tol`` (per channel) of ``rgb`` inside ``box`` = (left, top, right, bottom)."""
    import numpy as np

    pixels = np.asarray(Image.open(png).convert("RGB").crop(box), dtype=np.int16)
    return int((np.abs(pixels - np.array(rgb, np.int16)) <= tol).all(axis=-1).sum())


# service/static/index.html lays charts out on a fixed grid: 44 px header, 12 px padding and
# gaps, 580 x 250 px boxes, two per row; the canvas is 560 x 210 below a 22 px title, whose
# colour key (a swatch per line) sits in the title's first 24 px, above the chart box.
CHART_IDS = ("rate", "auc", "lag", "rows", "freshness", "memory")
LINE_RGB = (0x1F, 0x77, 0xB4)
SECOND_LINE_RGB = (0xFF, 0x7F, 0x0E)  # a chart's second line (cumulative AUC, the trainer's memory)
REF_RGB = (0xD6, 0x27, 0x28)  # a reference line (the Bayes-optimal AUC)
TEXT_RGB = (0x55, 0x55, 0x55)  # tick labels and units


def _chart_origin(i: int) -> tuple[int, int]:
    return 12 + (i % 2) * 592, 44 + 12 + (i // 2) * 262


def chart_boxes() -> dict[str, tuple[int, int, int, int]]:
    """The plot area and axes of each chart (its canvas and a little around it)."""
    boxes = {}
    for i, name in enumerate(CHART_IDS):
        left, top = _chart_origin(i)
        boxes[name] = (left, top + 24, left + 580, top + 250)
    return boxes


def title_boxes() -> dict[str, tuple[int, int, int, int]]:
    """The title row of each chart: its name, latest values and colour key."""
    boxes = {}
    for i, name in enumerate(CHART_IDS):
        left, top = _chart_origin(i)
        boxes[name] = (left, top, left + 580, top + 24)
    return boxes


def y_axis_boxes() -> dict[str, tuple[int, int, int, int]]:
    """The strip left of each plot where the y tick labels and the unit are drawn."""
    return {name: (left + 8, top, left + 8 + 54, bottom) for name, (left, top, _, bottom) in chart_boxes().items()}
