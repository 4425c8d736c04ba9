"""The fleet page (``python -m hwregress store fleet``): the view's assembly from store rows (hypothesis), a synthetic
fleet of 6 hosts in a real SQLite store with one slow, defective host marked on the page, the command end to end
in a subprocess, and bad input as one line."""

from __future__ import annotations

import datetime as dt
import html as html_module
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.html_checks import table_cells
from support.store_results import results_document

from hwregress.cli import main
from hwregress.report.fleet_view import FleetView, build_fleet_view, render_fleet
from hwregress.store.database import open_store

KEY = "nvidia-h100-sxm5-80gb"
MODELS = {"resnet50": 2900.0, "bert": 410.0, "vit": 1200.0}
CEILINGS = {("gemm", "bf16", "TFLOP/s"): 720.0, ("copy", None, "GB/s"): 2900.0}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
T0 = dt.datetime(2026, 11, 20, 8, 0, tzinfo=dt.timezone.utc)


def record(test_id: str, value: float, family: str = "throughput", model: str = "", dtype: str | None = "bf16",
           unit: str = "samples/s", gpu: str = "GPU-a", memory: int = 2**30) -> dict:
    return {"test_id": test_id, "family": family, "hardware_key": KEY, "device": "cuda:0", "model": model,
            "mode": "train", "batch_size": 64, "dtype": dtype, "unit": unit, "throughput": value,
            "samples": [value * 0.99, value, value * 1.01], "peak_memory_bytes": memory, "verdict": "new",
            "identity": {"gpu_uuid": gpu}}


def gpu_session(host: int, day: int, slow: bool = False, branch: str = "main", skip: str = "") -> dict:
    """Host ``host``'s session on day ``day``: every model and ceiling at the fleet's value (a 0.5% spread between
    hosts); ``slow``: resnet50 and bert 20% slow, the GEMM and copy ceilings 8% low, models at 1.5x the memory."""
    jitter = 1 + 0.005 * (host - 2.5)
    gpu, hostname = f"GPU-{host:04d}", f"gpu-{'abcdef'[host]}"
    records = [record(f"bench_tests/test_models.py::test_throughput[cuda-{m}-train-bs64]",
                      value * jitter * (0.8 if slow and m != "vit" else 1), model=m, gpu=gpu,
                      memory=2**30 * (3 if slow else 2))
               for m, value in MODELS.items() if m != skip]
    records += [record(f"bench_tests/test_ceilings.py::test_ceiling[cuda-{c}]", value * jitter * (0.92 if slow else 1),
                       family="ceiling", model=c, dtype=dtype, unit=unit, gpu=gpu)
                for (c, dtype, unit), value in CEILINGS.items()]
    started = T0 + dt.timedelta(days=day, hours=host)
    return {"schema_version": 5, "records": records,
            "meta": {"session": f"{hostname}-d{day}", "hostname": hostname, "started_at": started.isoformat(),
                     "finished_at": (started + dt.timedelta(minutes=30)).isoformat(), "exitstatus": 0,
                     "interrupted": False, "ci": {"commit": f"c0ffee{day}", "branch": branch,
                                                  "build": f"https://ci.example.org/{host}/{day}"}}}


def synthetic_fleet(url: str) -> None:
    """6 hosts, two sessions each: gpu-f healthy on day 1 and slow on day 2 (its latest); gpu-e has no vit on day 2
    and none on day 1 either (a gap); gpu-a's day-2 session is on a branch."""
    store = open_store(url)
    try:
        for host in range(6):
            store.push(gpu_session(host, 1, skip="vit" if host == 4 else ""))
            store.push(gpu_session(host, 2, slow=host == 5, branch="fix-1" if host == 0 else "main",
                                   skip="vit" if host == 4 else ""))
    finally:
        store.close()


def synthetic_view(tmp_path) -> tuple[str, FleetView]:
    """The URL of a store holding :func:`synthetic_fleet`, and the fleet page's view of it."""
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    synthetic_fleet(url)
    store = open_store(url)
    try:
        return url, build_fleet_view(KEY, store.sessions(), store.figures())
    finally:
        store.close()


def ratio_table(html: str, metric: str = "throughput") -> dict[str, list[str]]:
    return {row[0].strip(): [" ".join(cell.split()) for cell in row[4:]]
            for row in table_cells(html, "id", f"{metric}-{KEY}")}


def test_a_slow_host_is_an_outlier_and_defective_with_its_evidence_on_the_page(tmp_path):
    url, view = synthetic_view(tmp_path)
    assert [h.label for h in view.hosts] == ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e", "gpu-f"]
    assert [h.label for h in view.hosts if h.defective] == ["gpu-f"]
    html = render_fleet([view], url, generated_at="2026-11-27T10:00:00+00:00")
    ratios = ratio_table(html)
    resnet = ratios["test_throughput[cuda-resnet50-train-bs64]"]
    assert 0.80 < float(resnet[5].split()[0]) < 0.83 and resnet[5].endswith("outlier")  # day 2's, the latest
    assert all("outlier" not in cell and abs(float(cell) - 1) < 0.02 for cell in resnet[:5])
    assert ratios["test_throughput[cuda-vit-train-bs64]"][4] == "–"  # gpu-e never ran vit: a gap
    assert "outlier" not in " ".join(ratios["test_throughput[cuda-vit-train-bs64]"])
    gemm = ratios["test_ceiling[cuda-gemm]"]
    assert 0.92 < float(gemm[5].split()[0]) < 0.94 and gemm[5].endswith("outlier")
    assert "gpu-f defective" in table_header(html) and "gpu-e defective" not in table_header(html)
    evidence = {row[0]: row for row in table_cells(html, "id", f"evidence-{KEY}-GPU-0005")}
    assert set(evidence) == {"gemm_bf16_tflops", "copy_gbs", "test_throughput[cuda-resnet50-train-bs64]",
                             "test_throughput[cuda-bert-train-bs64]"}
    assert evidence["gemm_bf16_tflops"][1] == "GEMM" and evidence["copy_gbs"][1] == "device memory"
    assert "<strong>gpu-f</strong>: GPU-0005 is defective" in html
    sessions = table_cells(html, "id", f"sessions-{KEY}")
    assert len(sessions) == 12 and sessions[0][1] == "gpu-f" and sessions[0][2] == "main"  # newest first
    assert sum(row[2] == "fix-1" for row in sessions) == 1
    assert 'data-branch="fix-1"' in html and '<option value="=fix-1">' in html and 'type="date"' in html
    assert "<script src" not in html and "<link" not in html and "http://" not in html.replace(
        "https://ci.example.org", "")


def table_header(html: str) -> str:
    """The text of the throughput table's header row."""
    start = html.index(f'id="throughput-{KEY}"')
    return " ".join(re.sub(r"<[^>]+>", " ", html[html.index("<tr>", start):html.index("</tr>", start)]).split())


def test_peak_memory_is_shown_per_host_too(tmp_path):
    url, view = synthetic_view(tmp_path)
    html = render_fleet([view], url)
    memory = ratio_table(html, "peak_memory")
    assert memory["test_throughput[cuda-resnet50-train-bs64]"] == ["1.000"] * 5 + ["1.500 outlier"]
    assert memory["test_ceiling[cuda-gemm]"] == ["1.000"] * 6
    assert [row[2].strip() for row in table_cells(html, "id", f"peak_memory-{KEY}")][:2] == ["1 GiB", "1 GiB"]
    assert memory["test_throughput[cuda-vit-train-bs64]"][4] == "–"


sessions_strategy = st.lists(
    st.tuples(st.sampled_from(["h1", "h2", "h3", "h4"]), st.integers(0, 50),
              st.dictionaries(st.sampled_from(["t1", "t2", "t3"]),
                              st.one_of(st.floats(1e-3, 1e9), st.none(), st.just(0.0), st.just(math.nan),
                                        st.just(-1.0)), max_size=3)),
    min_size=1, max_size=12)


@given(sessions_strategy)
def test_the_view_uses_each_hosts_latest_usable_figure_and_every_ratio_is_finite(drawn):
    sessions, figures = [], []
    for index, (host, hour, tests) in enumerate(drawn):
        session_id = f"s{index:02d}"
        sessions.append({"id": session_id, "name": f"n{index:02d}", "host_id": host, "hostname": host,
                         "hardware_key": KEY, "started_at": T0 + dt.timedelta(hours=hour), "git_branch": "main"})
        figures += [{"session_id": session_id, "test_id": test, "metric": "throughput", "median": value,
                     "hardware_key": KEY, "unit": "samples/s", "family": "throughput", "model": test}
                    for test, value in tests.items()]
    view = build_fleet_view(KEY, sessions, figures)
    hosts = [h.host_id for h in view.hosts]
    assert sorted(hosts) == sorted({host for host, _, _ in drawn})
    by_id = {s["id"]: s for s in sessions}
    for row in view.rows_of("throughput"):
        for host, cell in zip(hosts, row.cells, strict=True):
            usable = [(by_id[f["session_id"]]["started_at"], by_id[f["session_id"]]["name"], f["median"])
                      for f in figures if f["test_id"] == row.test_id and by_id[f["session_id"]]["host_id"] == host
                      and f["median"] is not None and math.isfinite(f["median"]) and f["median"] > 0]
            if not usable:
                assert cell is None
                continue
            _, name, value = max(usable)
            assert (cell.session, cell.value) == (name, value)
            assert math.isfinite(cell.ratio) and cell.ratio > 0
            assert cell.outlier == (host in row.dropped)
    assert len(view.sessions) == len(sessions)


def test_the_command_writes_the_page_end_to_end(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    synthetic_fleet(url)
    open_store(url).push(results_document("cpu-1-20261127T012215Z"))  # a second key: its own section
    page = tmp_path / "fleet.html"
    done = subprocess.run([sys.executable, "-m", "hwregress", "store", "fleet", "--store", url, "-o", str(page)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{page}: fleet page of 2 hardware key(s), 7 host(s), from {url}"
    html = page.read_text()
    assert f'data-key="{KEY}"' in html and 'data-key="amd-epyc-f26m2-2t"' in html
    assert main(["store", "fleet", "--store", url, "--hardware-key", KEY, "-o", str(page)]) == 0
    html = page.read_text()
    assert f'data-key="{KEY}"' in html and 'data-key="amd-epyc-f26m2-2t"' not in html


def test_an_unknown_key_an_empty_store_and_the_store_as_output_are_one_line(tmp_path, capsys):
    database = tmp_path / "fleet.sqlite"
    url = f"sqlite:///{database}"
    page = str(tmp_path / "fleet.html")
    # an empty store: the page, a reader, never creates one (tests/store/test_store_read_only.py)
    open_store(url).close()
    assert main(["store", "fleet", "--store", url, "-o", page]) == 2
    err = capsys.readouterr().err
    assert "holds no session" in err and "store push" in err and err.count("\n") == 1
    synthetic_fleet(url)
    assert main(["store", "fleet", "--store", url, "--hardware-key", "nvidia-a100", "-o", page]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nvidia-a100'" in err and f"its keys: {KEY}" in err
    assert main(["store", "fleet", "--store", url, "-o", str(database)]) == 2
    assert "is the input" in capsys.readouterr().err
    assert not (tmp_path / "fleet.html").exists()


# Appended to a copy of the page: the session filter driven as a user would, the visible rows counted each time.
FILTER_PROBE = """
<script>
(function () {
  "use strict";
  var form = document.querySelector("form.session-filter"), counts = {shown: !form.hidden};
  function visible() {
    return Array.prototype.filter.call(document.querySelectorAll("table.fleet-sessions tr[data-host]"),
      function (row) { return !row.hidden && row.getClientRects().length > 0; }).length;
  }
  function set(name, value) {
    form.elements[name].value = value;
    form.dispatchEvent(new Event("change", {bubbles: true}));
    return visible();
  }
  counts.all = visible();
  counts.host = set("host", "GPU-0005");
  counts.host_and_branch = set("branch", "=fix-1");
  set("host", "");
  counts.branch = visible();
  set("branch", "");
  counts.since = set("since", "2026-11-22");
  counts.until = set("until", "2026-11-21");
  counts.text = form.querySelector(".count").textContent;
  document.documentElement.setAttribute("data-selftest", JSON.stringify(counts));
}());
</script>
"""


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed")
def test_the_session_filter_hides_and_shows_sessions_in_a_browser(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    synthetic_fleet(url)
    page = tmp_path / "fleet.html"
    assert main(["store", "fleet", "--store", url, "-o", str(page)]) == 0
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", FILTER_PROBE + "</body>"), encoding="utf-8")
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--enable-logging=stderr", "--v=0",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [line for line in dom.stderr.splitlines() if ":CONSOLE" in line] == []
    found = re.search(r'data-selftest="([^"]*)"', dom.stdout)
    assert found is not None, dom.stdout[:2000]
    counts = json.loads(html_module.unescape(found.group(1)))
    # 12 sessions: 6 hosts on day 1 (2026-11-21) and day 2; gpu-a's day-2 session on fix-1
    assert counts == {"shown": True, "all": 12, "host": 2, "host_and_branch": 0, "branch": 1, "since": 6,
                      "until": 0, "text": "0 of 12 sessions shown"}
