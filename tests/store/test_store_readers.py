"""The readers on the fleet store (issue 30, "every reader goes through it"): ``history``, ``history render`` and
``report compare`` with ``--store``, on real SQLite stores filled by ``store push`` / ``store import``. What
``history`` prints from the store equals what it prints from the store's exported history; ``report compare`` by
session id equals the comparison of the results files pushed; a results document rebuilt from the store pushes back
as the same figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.store_results import results_document, scale_speed
from synthetic import MACHINES, STEP_TEST, synthetic_history, synthetic_session, synthetic_test_id, write_session

from hwregress.cli import main
from hwregress.store.database import open_store
from hwregress.store.session_results import SessionNotFound, results_from_rows, session_results
from hwregress.store.session_rows import session_rows

SLOW = 5  # the test made twice as slow in session B


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def pushed_session(folder: Path, name: str, started: str, seed: int, **changes: Any) -> Path:
    """A 120-test results.json (hwregress's synthetic sessions, samples and peak memory) named ``name``."""
    session = synthetic_session(seed=seed, **changes)
    session.meta.update(session=name, started_at=started)
    return write_session(folder / name / "results.json", session)


@pytest.fixture
def history_store(tmp_path, capsys):
    """A store holding three machines' 30-session histories (imported: medians and quartiles) and two pushed sessions
    with samples on the first machine; its URL."""
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    history = synthetic_history(tmp_path / "imported", tests=6)
    pushed = [pushed_session(tmp_path, f"host-0-2026040{day}", f"2026-04-0{day}T02:00:00+00:00", seed=day, tests=6,
                             slowdowns={STEP_TEST: 1 / 0.85})  # still as slow as the history's last 10 sessions
              for day in (1, 2)]
    assert main(["store", "import", str(history), *map(str, pushed), "--store", url]) == 0
    capsys.readouterr()
    return url


def test_history_from_the_store_prints_what_its_exported_history_prints(history_store, tmp_path, capsys):
    exported = tmp_path / "exported"
    assert run(capsys, "store", "export", "--dir", str(exported), "--store", history_store)[0] == 0
    for options in ([], ["--status", "changed"], ["--key", "amd-epyc-7b13-f25m1-2t", "--last", "40"],
                    ["--key", "amd-epyc-7b13-f25m1-2t", "--key", "amd-epyc-7b13-f25m1-2t"],
                    ["--test", "resnet", "--since", "2026-03-20"]):
        from_folder = run(capsys, "history", "--dir", str(exported), *options)
        from_store = run(capsys, "history", "--store", history_store, *options)
        assert from_store == from_folder and from_store[1].count("\n") > 10, options

    folder_json = json.loads(run(capsys, "history", "--dir", str(exported), "--format", "json")[1])
    store_json = json.loads(run(capsys, "history", "--store", history_store, "--format", "json")[1])
    assert folder_json.pop("dir") == str(exported) and folder_json.pop("store") is None
    assert store_json.pop("dir") is None and store_json.pop("store") == history_store
    assert store_json == folder_json and {t["status"] for t in store_json["tests"]} >= {"regression", "drift"}

    gate = run(capsys, "history", "--store", history_store, "--fail-on", "regression")
    assert gate[0] == 1 and gate[2] == run(capsys, "history", "--dir", str(exported), "--fail-on", "regression")[2]


def test_history_render_from_the_store_draws_every_test_of_every_key(history_store, tmp_path, capsys):
    page = tmp_path / "dashboard.html"
    status, out, err = run(capsys, "history", "render", "--store", history_store, "-o", str(page))
    assert status == 0 and err == ""
    assert out.startswith(f"wrote {page} (18 tests on 3 hardware keys, ") and page.is_file()
    text = page.read_text(encoding="utf-8")
    assert history_store in text
    for key, _, _, _ in MACHINES:
        assert f"<code>{key}</code>" in text


def _history_section(html: str) -> str:
    """The report's History section without the sources line's names (a folder, a store URL)."""
    section = html.split('<h2 id="history">', 1)[1].split("<h2>Per-test detail", 1)[0].split("<script", 1)[0]
    return re.sub(r"\(<code>[^<]*</code>\)", "", section)


def test_report_render_and_merge_draw_the_stores_trends_as_its_exported_history(history_store, tmp_path, capsys):
    exported = tmp_path / "exported"
    assert run(capsys, "store", "export", "--dir", str(exported), "--store", history_store)[0] == 0
    results = [str(tmp_path / f"host-0-2026040{day}" / "results.json") for day in (1, 2)]
    pages = {}
    for action, files in (("render", results[1:]), ("merge", results)):
        for name, source in (("store", ["--store", history_store]), ("folder", ["--history-dir", str(exported)])):
            page = tmp_path / f"{action}-{name}.html"
            assert run(capsys, "report", action, *files, "-o", str(page), *source)[0] == 0
            pages[action, name] = page.read_text()
        store_section = _history_section(pages[action, "store"])
        assert "first bad session" in store_section and "fleet.sqlite" in pages[action, "store"]
        assert store_section == _history_section(pages[action, "folder"])
    status, _, err = run(capsys, "report", "render", results[1], "-o", str(tmp_path / "x.html"),
                         "--store", f"sqlite:///{tmp_path / 'absent.sqlite'}")
    assert status == 2 and "no such SQLite store" in err and not (tmp_path / "absent.sqlite").exists()
    status, _, err = run(capsys, "report", "render", results[1], "-o", history_store.removeprefix("sqlite:///"),
                         "--store", history_store)
    assert status == 2 and "fleet.sqlite" in err  # the page may not replace the store it reads


def test_history_store_option_without_url_reads_hwregress_store(history_store, monkeypatch, capsys):
    monkeypatch.setenv("HWREGRESS_STORE", history_store)
    status, out, _ = run(capsys, "history", "--store", "--key", "amd-epyc-7b13-f25m1-2t")
    assert status == 0 and out == run(capsys, "history", "--store", history_store, "--key",
                                      "amd-epyc-7b13-f25m1-2t")[1]


def test_history_store_errors_are_one_line(history_store, tmp_path, capsys):
    cases = [
        (["history", "--store", history_store, "--dir", str(tmp_path)], "--store and --dir"),
        (["history", "--store", history_store, "--key", "no-such-key"], "no history for hardware key no-such-key"),
        (["history", "--store", f"sqlite:///{tmp_path / 'none' / 'missing.sqlite'}"], "no such SQLite store"),
        (["report", "compare", "a", "b", "--store", f"sqlite:///{tmp_path / 'none' / 'missing.sqlite'}", "-o",
          str(tmp_path / "d.html")], "no such SQLite store"),
        (["history", "--store", "nosuch://x"], "no SQLAlchemy dialect"),
        (["history", "render", "--store", history_store, "-o", str(tmp_path / "fleet.sqlite")],
         "an output never overwrites an input"),
        (["history", "render", "--store", history_store, "-o", str(tmp_path / "fleet.sqlite-wal")],
         "an output never overwrites an input"),
        (["history", "append", str(tmp_path / "journal.jsonl"), "--store", history_store],
         "--store: is not an option of `history append`"),
    ]
    for argv, said in cases:
        status, _, err = run(capsys, *argv)
        assert status == 2 and said in err and err.count("\n") == 1 and err.startswith("hwregress: "), (argv, err)
    assert (tmp_path / "fleet.sqlite").stat().st_size > 0 and not (tmp_path / "none").exists()  # a reader creates none


@pytest.fixture
def compared_store(tmp_path, capsys):
    """Two 120-test sessions pushed into a store, B's test SLOW twice as slow; (url, results A, results B)."""
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    a = pushed_session(tmp_path, "host-0-20260401T020000Z", "2026-04-01T02:00:00+00:00", seed=1)
    b = pushed_session(tmp_path, "host-0-20260402T020000Z", "2026-04-02T02:00:00+00:00", seed=2,
                       slowdowns={SLOW: 2.0})
    assert main(["store", "push", str(a), str(b), "--store", url]) == 0
    capsys.readouterr()
    return url, a, b


def test_report_compare_by_session_id_judges_what_the_results_files_judge(compared_store, tmp_path, capsys):
    url, a, b = compared_store
    store = open_store(url)
    b_uuid = store.sessions()[1]["id"]
    store.close()
    by_file = run(capsys, "report", "compare", str(a), str(b), "-o", str(tmp_path / "files.html"),
                  "--fail-on", "regression")
    page = tmp_path / "stored.html"
    status, out, err = run(capsys, "report", "compare", "host-0-20260401T020000Z", b_uuid, "--store", url,
                           "-o", str(page), "--fail-on", "regression")
    assert status == by_file[0] == 1 and err == by_file[2]
    assert out == f"wrote {page} (120 tests in both sessions: 1 regression, 119 pass)\n"
    assert re.fullmatch(rf"hwregress: regression: {re.escape(synthetic_test_id(SLOW))} \(B/A 0\.\d+\)\n", err)
    text = page.read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="row-([a-z-]+)" data-verdict="\1">', text)
    assert rows[0] == "regression" and rows.count("pass") == 119
    assert "host-0-20260401T020000Z" in text and b_uuid in text


def test_report_compare_an_unknown_session_names_the_closest(compared_store, tmp_path, capsys):
    url, _, _ = compared_store
    status, out, err = run(capsys, "report", "compare", "host-0-20260401T020000Z", "host-0-20260403T020000Z",
                           "--store", url, "-o", str(tmp_path / "d.html"))
    assert status == 2 and out == "" and err.count("\n") == 1 and not (tmp_path / "d.html").exists()
    assert "no session 'host-0-20260403T020000Z' in the store" in err
    assert "closest: host-0-20260401T020000Z, host-0-20260402T020000Z" in err or \
           "closest: host-0-20260402T020000Z, host-0-20260401T020000Z" in err


def test_session_not_found_lists_the_closest_ids(compared_store):
    store = open_store(compared_store[0])
    try:
        with pytest.raises(SessionNotFound) as raised:
            session_results(store, "host-0-20260402T02000Z")
    finally:
        store.close()
    assert raised.value.closest[0] == "host-0-20260402T020000Z"


def test_the_readers_read_a_postgresql_store(postgres_database, tmp_path, capsys):
    a = pushed_session(tmp_path, "gpu-1-20260401T020000Z", "2026-04-01T02:00:00+00:00", seed=1, tests=8)
    b = pushed_session(tmp_path, "gpu-1-20260402T020000Z", "2026-04-02T02:00:00+00:00", seed=2, tests=8,
                       slowdowns={SLOW: 2.0})
    assert main(["store", "push", str(a), str(b), "--store", postgres_database]) == 0
    page = tmp_path / "diff.html"
    capsys.readouterr()
    status, out, _ = run(capsys, "report", "compare", "gpu-1-20260401T020000Z", "gpu-1-20260402T020000Z",
                         "--store", postgres_database, "-o", str(page), "--fail-on", "regression")
    assert status == 1 and out == f"wrote {page} (8 tests in both sessions: 1 regression, 7 pass)\n"
    assert run(capsys, "store", "export", "--dir", str(tmp_path / "exported"), "--store", postgres_database)[0] == 0
    from_store = run(capsys, "history", "--store", postgres_database)
    assert from_store == run(capsys, "history", "--dir", str(tmp_path / "exported")) and from_store[0] == 0
    assert from_store[1].endswith("8 tests: 8 short\n")  # two sessions: too short for a status


FINITE = st.floats(min_value=0.001, max_value=1e6, allow_nan=False)
OPTIONAL = st.none() | FINITE


@st.composite
def results_documents(draw: Any) -> dict[str, Any]:
    """A results document of 1-5 tests, each with any of the figures the store keeps."""
    records = []
    for index in range(draw(st.integers(1, 5))):
        record: dict[str, Any] = {
            "test_id": f"bench_tests/test_x.py::test_{index}",
            "family": draw(st.sampled_from(["throughput", "ceiling"])),
            "hardware_key": draw(st.sampled_from(["cpu-a", "nvidia-h100"])), "device": "cpu", "model": "m",
            "mode": draw(st.sampled_from(["train", "infer"])), "batch_size": draw(st.integers(1, 64)), "dtype": "fp32",
            "unit": draw(st.sampled_from(["samples/s", "TFLOP/s"])), "samples": draw(st.lists(FINITE, max_size=6)),
            "throughput": draw(OPTIONAL), "latency_ms": draw(OPTIONAL), "accuracy": draw(OPTIONAL),
            "speedup": draw(OPTIONAL), "efficiency": draw(OPTIONAL),
            "peak_memory_bytes": draw(st.none() | st.integers(1, 2**40)),
            "baseline_peak_memory_bytes": draw(st.none() | st.integers(1, 2**40)),
            "baseline_throughput": draw(OPTIONAL), "baseline_latency_ms": draw(OPTIONAL), "ratio": draw(OPTIONAL),
            "threshold": draw(OPTIONAL), "p_value": draw(OPTIONAL), "memory_ratio": draw(OPTIONAL),
            "verdict": draw(st.sampled_from(["pass", "regression", "new", "unstable"])),
            "reach": draw(st.none() | st.builds(lambda mds: {"figure": "throughput", "mds": mds}, FINITE)),
            "latency_reach": draw(st.none() | st.builds(lambda mds: {"figure": "latency", "mds": mds}, FINITE)),
            "identity": {"cpu_brand": "X"}, "diagnosis": draw(st.lists(st.sampled_from(["a", "b"]), max_size=2)),
            "baseline_recorded_at": draw(st.none() | st.just("2026-11-01T00:00:00+00:00")),
            "environment": {"torch": "2.13.0"},
        }
        records.append(record)
    document = results_document("vm-9-20261127T012215Z", tests=0)
    document["records"] = records
    return document


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=results_documents())
def test_a_rebuilt_results_document_pushes_back_as_the_same_session(document):
    rows = session_rows(document)
    figures = [{**row, "session_id": rows.session["id"], "id": number} for number, row in enumerate(rows.figures)]
    rebuilt = results_from_rows({**rows.session, "pushed_at": None}, figures)
    again = session_rows(json.loads(json.dumps(rebuilt)))
    measured = {row["test_id"] for row in rows.figures}  # a test without a figure is not in the store
    kept = session_rows({**document, "records": [r for r in document["records"] if r["test_id"] in measured]})
    assert again.session == kept.session and again.host == kept.host
    assert sorted(again.figures, key=_figure_key) == sorted(rows.figures, key=_figure_key)


def _figure_key(row: dict[str, Any]) -> tuple[str, str]:
    return row["test_id"], row["metric"]


def test_session_results_reads_a_pushed_session_back_and_it_pushes_again_as_the_same_rows(tmp_path):
    store, again = (open_store(f"sqlite:///{tmp_path / name}") for name in ("fleet.sqlite", "again.sqlite"))
    try:
        document = pushed_session(tmp_path, "host-0-20260401T020000Z", "2026-04-01T02:00:00+00:00", seed=1, tests=12)
        outcome = store.push(json.loads(document.read_text(encoding="utf-8")))
        by_name = session_results(store, "host-0-20260401T020000Z")
        assert session_results(store, outcome.session_id) == by_name
        assert again.push(json.loads(json.dumps(by_name))) == outcome  # same id, inserted, as many figures
        assert [_without(row, "id") for row in again.figures()] == [_without(row, "id") for row in store.figures()]
        assert [_without(row, "pushed_at") for row in again.sessions()] == [
            _without(row, "pushed_at") for row in store.sessions()]
        assert again.hosts() == store.hosts()
    finally:
        store.close()
        again.close()


def _without(row: dict[str, Any], column: str) -> dict[str, Any]:
    """A stored row without the column that differs between two stores (a figure's serial id, a push's time)."""
    return {key: value for key, value in row.items() if key != column}


# --host: one runner's sessions of the store
def _two_runners(path: Path, runners: tuple[str, ...] = ("runner-1", "runner-2")) -> str:
    """A SQLite store at ``path`` holding four sessions of each runner in ``runners`` (its own machine id), runner-2
    20% slower; its URL."""
    url = f"sqlite:///{path}"
    store = open_store(url)
    try:
        for day in range(1, 5):
            for runner in runners:
                document = results_document(f"{runner}-{day}", started=f"2026-11-0{day}T0{runner[-1]}:00:00+00:00")
                document["meta"].update(hostname=runner, machine_id=runner[-1] * 32)
                store.push(scale_speed(document, 0.8 if runner == "runner-2" else 1.0))
    finally:
        store.close()
    return url


def test_host_reads_one_runners_sessions_by_hostname_or_host_id(tmp_path, capsys):
    url = _two_runners(tmp_path / "fleet.sqlite")
    sessions = {name: {t["sessions"] for t in json.loads(run(capsys, "history", "--store", url, *host,
                                                             "--format", "json")[1])["tests"]}
                for name, host in (("every", []), ("runner-1", ["--host", "runner-1"]),
                                   ("both", ["--host", "runner-1", "--host", "2" * 32]))}
    assert sessions == {"every": {8}, "runner-1": {4}, "both": {8}}
    alone = run(capsys, "history", "--store", _two_runners(tmp_path / "alone.sqlite", ("runner-1",)))
    assert run(capsys, "history", "--store", url, "--host", "runner-1") == alone


def test_report_render_with_host_draws_that_runners_trends(tmp_path, capsys):
    url = _two_runners(tmp_path / "fleet.sqlite")
    alone = _two_runners(tmp_path / "alone.sqlite", ("runner-2",))
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("runner-2-5", started="2026-11-05T02:00:00+00:00")))
    pages = {}
    for name, source in (("host", ["--store", url, "--host", "runner-2"]), ("alone", ["--store", alone]),
                         ("every", ["--store", url])):
        page = tmp_path / f"{name}.html"
        assert run(capsys, "report", "render", str(results), "-o", str(page), *source)[0] == 0
        pages[name] = _history_section(page.read_text())
    assert pages["host"] == pages["alone"] != pages["every"]


def test_host_errors_are_one_line(tmp_path, capsys):
    url = _two_runners(tmp_path / "fleet.sqlite")
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("s")))
    cases = [
        (["history", "--store", url, "--host", "runner-9"], "no host 'runner-9' in the store"),
        (["history", "--dir", str(tmp_path), "--host", "runner-1"],
         "--host: runner-1 names a runner of the fleet store"),
        (["report", "render", str(results), "-o", str(tmp_path / "p.html"), "--host", "runner-1"],
         "and no --store was given"),
        (["report", "render", str(results), "-o", str(tmp_path / "p.html"), "--store", url, "--host", "runner-1",
          "--history-dir", str(tmp_path)], "--host and --history-dir: --host picks a runner's sessions of the store"),
        (["history", "--store", url, "--host", "runner-1", "--key", "nvidia-h100"],
         "no history for hardware key nvidia-h100 of host runner-1 (known of host runner-1: amd-epyc-f26m2-2t; leave"),
        (["report", "merge", str(results), "-o", str(tmp_path / "p.html"), "--store", url, "--host", "nobody"],
         "give a host id or a hostname the store knows: 1111"),
    ]
    for argv, said in cases:
        status, _, err = run(capsys, *argv)
        assert status == 2 and said in err and err.count("\n") == 1 and err.startswith("hwregress: "), (argv, err)
    assert "runner-1, runner-2" not in err and "(runner-1)" in err and "(runner-2)" in err
