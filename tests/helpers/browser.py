"""Chromium headless for the HTML reports: the browser (or a skip saying how to get it), a page rendered, and
its colours."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.helpers.env import require

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--mute-audio", "--force-device-scale-factor=1"]


BOOTED_BG, REFUSED_BG = (0xC8, 0xE6, 0xC9), (0xFF, 0xF3, 0xC4)  # harness/report/html.py COLOURS


def chromium() -> str:
    exe = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    require("chromium", exe is not None, "apt-get update && apt-get install -y chromium")
    return exe or ""


def browse(exe: str, page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=180)


def near(colours: set[tuple[int, int, int]], want: tuple[int, int, int], tol: int = 10) -> bool:
    return any(all(abs(c[i] - want[i]) <= tol for i in range(3)) for c in colours)


def has_pil() -> bool:
    import importlib.util

    return importlib.util.find_spec("PIL") is not None
