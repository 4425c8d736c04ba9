"""The report in a real headless browser (Debian's chromium): loads without console errors, every chart
renders with a non-empty box, and a screenshot is kept under reports/selftest/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.project import REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000"]

# CI installs chromium (.ci/run), so there a missing browser is a failure, not a skip
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                                 reason="chromium is not installed (apt-get install chromium)")]


def _chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    assert CHROMIUM is not None, "chromium is not installed: apt-get install chromium"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


def test_report_renders_in_chromium(hw_project, tmp_path):
    hw_project.run("--batch-sizes", "1,4").assert_outcomes(passed=4)
    page = hw_project.path / "reports" / "report.html"
    dom = _chromium(page, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    charts = int(re.search(r'data-charts="(\d+)"', dom.stdout).group(1))
    rendered = int(re.search(r'data-charts-rendered="(\d+)"', dom.stdout).group(1))
    assert charts >= 3 and rendered == charts
    screenshot_dir = REPO / "reports" / "selftest"
    screenshot_dir.mkdir(parents=True, exist_ok=True)
    shot = _chromium(page, tmp_path / "profile-shot", "--window-size=1400,2000",
                     f"--screenshot={screenshot_dir / 'report.png'}")
    assert shot.returncode == 0 and (screenshot_dir / "report.png").stat().st_size > 10_000
