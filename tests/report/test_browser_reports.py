"""The history dashboard and the session comparison page in a real headless browser (Debian's chromium), from
synthetic data (tests/synthetic.py): no console errors, every element of every SVG chart inside its SVG's box, and the
dashboard's filters hide and show what they should."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from synthetic import (
    MACHINES,
    STEP_TEST,
    ab_session,
    judged_session,
    synthetic_history,
    synthetic_session,
    synthetic_test_id,
    write_session,
)

from hwregress.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--window-size=1400,2400"]
SCREENSHOT = os.environ.get("HWREGRESS_DASHBOARD_SCREENSHOT")  # where to keep a screenshot of the dashboard, if set

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                                 reason="chromium is not installed (apt-get install chromium)")]

# Appended to a copy of the page: every drawn element of every <svg> must lie inside the SVG's box (half a pixel
# of rounding allowed) and no two of its text labels may overlap; then the filter form, driven as a user would, is
# counted under each selection.
CHECK = """
<script>
(function () {
  "use strict";
  var problems = [], overlaps = [], checked = 0, svgs = document.querySelectorAll("svg");
  svgs.forEach(function (svg, index) {
    var box = svg.getBoundingClientRect();
    svg.querySelectorAll("text, line, circle, rect, polyline, polygon, path, ellipse").forEach(function (el) {
      var r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) { return; }
      checked += 1;
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 ||
          r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) {
        problems.push({svg: index, chart: svg.getAttribute("aria-label"), element: el.outerHTML.slice(0, 200),
                       svg_box: [box.left, box.top, box.right, box.bottom], box: [r.left, r.top, r.right, r.bottom]});
      }
    });
    var labels = [];
    svg.querySelectorAll("text").forEach(function (el) {
      var r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0) { return; }
      labels.forEach(function (other) {
        var o = other.getBoundingClientRect();
        var wide = Math.min(r.right, o.right) - Math.max(r.left, o.left);
        var high = Math.min(r.bottom, o.bottom) - Math.max(r.top, o.top);
        if (wide > 0.5 && high > 0.5) {
          overlaps.push({svg: index, chart: svg.getAttribute("aria-label"), a: other.textContent.slice(0, 80),
                         b: el.textContent.slice(0, 80), overlap_px: [wide, high]});
        }
      });
      labels.push(el);
    });
  });
  var filters = {};
  var form = document.getElementById("dashboard-filter");
  if (form) {
    var visible = function () {
      return Array.prototype.filter.call(document.querySelectorAll("[data-facets]"), function (el) {
        return !el.hidden && el.getClientRects().length > 0;
      }).length;
    };
    filters.form_shown = !form.hidden;
    filters.all = visible();
    form.querySelectorAll("select").forEach(function (select) {
      Array.prototype.forEach.call(select.options, function (option) {
        if (!option.value) { return; }
        select.value = option.value;
        select.dispatchEvent(new Event("change", {bubbles: true}));
        filters[select.name + "=" + option.value] = visible();
      });
      select.value = "";
      select.dispatchEvent(new Event("change", {bubbles: true}));
    });
    filters.reset = visible();
    filters.count_text = document.getElementById("filter-count").textContent;
  }
  document.documentElement.setAttribute("data-selftest", JSON.stringify(
    {svgs: svgs.length, checked: checked, problems: problems, overlaps: overlaps, filters: filters}));
}());
</script>
"""


def chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    assert CHROMIUM is not None, "chromium is not installed: apt-get install chromium"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=180)


def inspect(page: Path, tmp_path: Path) -> dict[str, Any]:
    """Load a copy of ``page`` with CHECK appended; returns what CHECK found (after asserting no console message)."""
    probe = page.with_name(f"probe-{page.name}")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", CHECK + "</body>"), encoding="utf-8")
    dom = chromium(probe, tmp_path / f"profile-{page.stem}", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    found = re.search(r'data-selftest="([^"]*)"', dom.stdout)
    assert found is not None, dom.stdout[:2000]
    return json.loads(html.unescape(found.group(1)))


def test_dashboard_charts_stay_inside_their_svgs_and_filters_work(tmp_path, capsys):
    directory = synthetic_history(tmp_path / "history")
    page = tmp_path / "dashboard.html"
    assert main(["history", "render", "--dir", str(directory), "-o", str(page)]) == 0, capsys.readouterr().err
    found = inspect(page, tmp_path)
    assert found["svgs"] == 115 + 3  # a sparkline per steady row, a trend chart per moved test
    assert found["problems"] == [], json.dumps(found["problems"][:5], indent=1)
    filters = found["filters"]
    # 3 moved test ids drawn in full (holding 5 of the 120 (key, test) series: the GPU keys share test ids), 115 rows
    total = 3 + 115
    assert filters["form_shown"] and filters["all"] == total and filters["reset"] == total
    assert filters["count_text"] == f"{total} of {total} shown"
    cpu_key, h100_key, h200_key = (machine[0] for machine in MACHINES)
    assert filters[f"key={cpu_key}"] == 1 + 39  # the step regression, and its 39 steady tests
    assert filters[f"key={h100_key}"] == 2 + 38  # the drift and the improvement sections hold an H100 series each
    assert filters["device=NVIDIA H200"] == filters[f"key={h200_key}"]
    assert filters["status=regression"] == 1 and filters["status=drift"] == 1 and filters["status=improvement"] == 1
    assert filters["status=steady"] == 115 + 2  # and the two moved sections that also hold a steady series
    assert filters["family=throughput"] == total
    assert (sum(filters[f"model={model}"] for model in ("resnet18", "mobilenet_v3_small", "vit_b_16", "bert", "gpt2"))
            == total)
    if SCREENSHOT:
        shot = chromium(page, tmp_path / "profile-shot", f"--screenshot={SCREENSHOT}")
        assert shot.returncode == 0 and Path(SCREENSHOT).stat().st_size > 10_000


def test_compare_page_charts_stay_inside_their_svgs(tmp_path, capsys):
    a = write_session(tmp_path / "a" / "results.json", synthetic_session(seed=1))
    b = write_session(tmp_path / "b" / "results.json", synthetic_session(seed=2, slowdowns={STEP_TEST: 2.0, 3: 1.6}))
    page = tmp_path / "diff.html"
    assert main(["report", "compare", str(a), str(b), "-o", str(page), "--fail-on", "regression"]) == 1
    found = inspect(page, tmp_path)
    assert found["svgs"] == 120 + 1  # a strip of samples per test, and the bar chart of the two that changed
    assert found["problems"] == [], json.dumps(found["problems"][:5], indent=1)
    assert synthetic_test_id(STEP_TEST).rsplit("::", 1)[-1] in page.read_text(encoding="utf-8")


def test_report_of_a_judged_120_test_session_keeps_every_element_inside_its_svg_and_no_labels_overlap(tmp_path, capsys):
    results = write_session(tmp_path / "session" / "results.json", judged_session())
    page = tmp_path / "report.html"
    assert main(["report", "render", str(results), "-o", str(page)]) == 0, capsys.readouterr().err
    found = inspect(page, tmp_path)
    html_text = page.read_text(encoding="utf-8")
    assert 'class="chart regressed"' in html_text and found["svgs"] >= 5  # the top chart, throughput and memory charts
    assert found["checked"] > 900  # 118 dots and bands, 120 markers per chart kind, legends, ticks
    assert found["problems"] == [], json.dumps(found["problems"][:5], indent=1)
    assert found["overlaps"] == [], json.dumps(found["overlaps"][:5], indent=1)


def test_report_of_an_ab_session_keeps_every_element_inside_its_svg_and_no_labels_overlap(tmp_path, capsys):
    results = write_session(tmp_path / "ab" / "results.json", ab_session())
    page = tmp_path / "report.html"
    assert main(["report", "render", str(results), "-o", str(page)]) == 0, capsys.readouterr().err
    found = inspect(page, tmp_path)
    html_text = page.read_text(encoding="utf-8")
    # the forest plot, and the pairs of every A/B test that measured a window (stack B of one failed)
    assert html_text.count('class="chart ab-forest"') == 1 and html_text.count('class="chart ab-pairs"') == 5
    assert found["problems"] == [], json.dumps(found["problems"][:5], indent=1)
    assert found["overlaps"] == [], json.dumps(found["overlaps"][:5], indent=1)


def test_the_check_sees_two_labels_drawn_on_top_of_each_other(tmp_path):
    # the check itself: a label over another is reported, one beside it is not (else the report tests prove nothing)
    page = tmp_path / "overlap.html"
    page.write_text('<!doctype html><html><body><svg width="300" height="60" aria-label="probe" '
                    'xmlns="http://www.w3.org/2000/svg"><text x="10" y="20">regression</text>'
                    '<text x="30" y="22">unstable</text><text x="200" y="50">apart</text></svg></body></html>',
                    encoding="utf-8")
    found = inspect(page, tmp_path)
    assert [(o["a"], o["b"]) for o in found["overlaps"]] == [("regression", "unstable")]
    assert found["problems"] == []
