"""``python -m hwregress``: baselines list/show/diff and report merge; outputs never over an input, and only to a
regular file or a new path."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hwregress.cli import main
from hwregress.store.baselines import BaselineStore
from hwregress.store.history import HistoryStore
from hwregress.store.history_row import HISTORY_ROW_VERSION
from hwregress.store.result_files import write_results
from hwregress.store.results import SessionResults, TestRecord


def _store(tmp_path):
    store = BaselineStore(tmp_path / "baselines")
    entry = {"samples": [10.0, 11.0, 9.0], "median": 10.0, "iqr": 1.0, "n": 3, "unit": "samples/s",
             "peak_memory_bytes": 2**20, "environment": {"torch": "2.13.0"}, "recorded_at": "2026-11-22T10:00:00+00:00"}
    store.write_entries("cpu-a", "CPU A", {"throughput/resnet18/train/bs8/fp32": entry})
    store.write_entries("cpu-b", "CPU B", {"throughput/resnet18/train/bs8/fp32": dict(entry, median=20.0),
                                           "throughput/alexnet/train/bs8/fp32": entry})
    return store


def test_list_show_diff(tmp_path, capsys):
    store = _store(tmp_path)
    assert main(["baselines", "list", "--dir", str(store.directory)]) == 0
    out = capsys.readouterr().out
    assert "cpu-a" in out and "CPU B" in out
    assert main(["baselines", "show", "cpu-b", "--dir", str(store.directory)]) == 0
    assert "throughput/alexnet/train/bs8/fp32" in capsys.readouterr().out
    assert main(["baselines", "diff", str(store.path_for("cpu-a")), str(store.path_for("cpu-b"))]) == 0
    out = capsys.readouterr().out
    assert "throughput/resnet18/train/bs8/fp32" in out and "2" in out and "only in B: throughput/alexnet" in out


def test_diff_against_results(tmp_path, capsys):
    store = _store(tmp_path)
    record = TestRecord("t", family="throughput", hardware_key="cpu-a", model="resnet18", mode="train", batch_size=8,
                        dtype="fp32", throughput=5.0, samples=[5.0])
    paths = write_results(SessionResults({}, [record]), tmp_path / "reports").paths
    assert main(["baselines", "diff", str(store.path_for("cpu-a")), str(paths["results"])]) == 0
    assert "0.5" in capsys.readouterr().out


def test_unknown_key_and_corrupt_file_are_errors(tmp_path, capsys):
    store = _store(tmp_path)
    assert main(["baselines", "show", "nope", "--dir", str(store.directory)]) == 2
    assert "known: cpu-a, cpu-b" in capsys.readouterr().err
    store.path_for("cpu-a").write_text("{")
    assert main(["baselines", "show", "cpu-a", "--dir", str(store.directory)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_report_merge_as_module(tmp_path):
    files = []
    for key, value in (("machine-a", 10.0), ("machine-b", 30.0)):
        record = TestRecord("t", hardware_key=key, model="resnet18", mode="train", batch_size=8, dtype="fp32",
                            throughput=value, device="cuda:0")
        files.append(str(write_results(SessionResults({"hostname": key}, [record]), tmp_path / key).paths["results"]))
    out = tmp_path / "merged.html"
    completed = subprocess.run([sys.executable, "-m", "hwregress", "report", "merge", *files, "-o", str(out)],
                               capture_output=True, text=True, check=True)
    assert "2 machines" in completed.stdout
    html = out.read_text()
    assert "machine-a" in html and "machine-b" in html and "3×" in html


def test_merge_refuses_non_results(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema_version": 42}))
    assert main(["report", "merge", str(bad), "-o", str(tmp_path / "m.html")]) == 2
    assert "not a hwregress results file" in capsys.readouterr().err


# -- errors: one line, exit 2, never a traceback --------------------------------------------------------
def _one_error(capsys, *names: str) -> str:
    """The single stderr line of a failed command; it names every ``names`` and ends with a (fix)."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hwregress: ") and lines[0].endswith(")"), err
    assert "Traceback" not in err and all(str(name) in lines[0] for name in names), err
    return lines[0]


def test_diff_of_a_truncated_file_is_one_line(tmp_path, capsys):
    store = _store(tmp_path)
    path = store.path_for("cpu-a")
    path.write_bytes(path.read_bytes()[:40])
    assert main(["baselines", "diff", str(path), str(store.path_for("cpu-b"))]) == 2
    assert "not valid JSON" in _one_error(capsys, path)


def test_show_of_a_folder_a_latin1_file_and_a_bad_entry(tmp_path, capsys):
    store = _store(tmp_path)
    folder = tmp_path / "folder.json"
    folder.mkdir()
    assert main(["baselines", "show", str(folder)]) == 2
    assert "is a folder, not a regular file" in _one_error(capsys, folder)
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"schema_version": 1, "device_name": "Gerät", "entries": {}}'.encode("latin-1"))
    assert main(["baselines", "show", str(latin)]) == 2
    assert "not UTF-8 text (byte 0xe4 at offset" in _one_error(capsys, latin)
    path = store.path_for("cpu-b")
    data = json.loads(path.read_text())
    data["entries"]["throughput/alexnet/train/bs8/fp32"]["samples"] = ["x"]
    path.write_text(json.dumps(data))
    assert main(["baselines", "show", "cpu-b", "--dir", str(store.directory)]) == 2
    out, err = capsys.readouterr()
    assert "throughput/resnet18/train/bs8/fp32" in out  # the good entries are still shown
    (line,) = err.splitlines()
    assert line.startswith(f"hwregress: {path}: entry 'throughput/alexnet/train/bs8/fp32' 'samples'[0] must be")
    assert "--update-baselines=force" in line


def test_list_skips_non_files_and_reports_bad_ones(tmp_path, capsys):
    store = _store(tmp_path)
    (store.directory / "dir.json").mkdir()
    store.path_for("cpu-a").write_text("{")
    assert main(["baselines", "list", "--dir", str(store.directory)]) == 2
    out = capsys.readouterr().out
    assert "dir.json: skipped: a folder" in out and "cpu-a" in out and "UNREADABLE" in out and "CPU B" in out


def _journal_with_a_null_line(tmp_path):
    record = TestRecord("t", hardware_key="cpu-a", model="resnet18", mode="train", batch_size=8, dtype="fp32",
                        throughput=5.0, samples=[5.0])
    path = tmp_path / "results-x-unfinished.jsonl"
    path.write_text(json.dumps(record.to_json()) + "\nnull\n")
    return path


def test_render_of_a_journal_with_a_null_line_renders_what_is_readable(tmp_path, capsys):
    journal = _journal_with_a_null_line(tmp_path)
    out = tmp_path / "page.html"
    assert main(["report", "render", str(journal), "-o", str(out)]) == 0
    assert "1 tests; skipped 1 unreadable lines" in capsys.readouterr().out
    assert "resnet18" in out.read_text()


def test_render_error_names_the_file_once(tmp_path, capsys):
    bad = tmp_path / "results.json"
    bad.write_text("{nope")
    assert main(["report", "render", str(bad), "-o", str(tmp_path / "x.html")]) == 2
    assert _one_error(capsys, bad).count(str(bad)) == 1
    assert not (tmp_path / "x.html").exists()


def test_empty_or_folder_output_is_an_error(tmp_path, capsys):
    journal = _journal_with_a_null_line(tmp_path)
    assert main(["report", "render", str(journal), "-o", ""]) == 2
    assert "the output path is empty" in _one_error(capsys, "-o")
    assert main(["report", "render", str(journal), "-o", str(tmp_path)]) == 2
    assert "is a folder" in _one_error(capsys, tmp_path)


def test_output_never_overwrites_an_input(tmp_path, capsys, monkeypatch):
    journal = _journal_with_a_null_line(tmp_path)
    before = journal.read_bytes()
    link = tmp_path / "link.html"
    link.symlink_to(journal)
    monkeypatch.chdir(tmp_path)
    for output in (str(journal), str(link), journal.name, f"./sub/../{journal.name}"):
        assert main(["report", "render", str(journal), "-o", output]) == 2
        assert "never overwrites an input" in _one_error(capsys, output, journal)
    results = write_results(SessionResults({}, [TestRecord("t", hardware_key="k")]), tmp_path / "r").paths["results"]
    assert main(["report", "merge", str(results), str(journal), "-o", str(results)]) == 2
    _one_error(capsys, results)
    assert journal.read_bytes() == before and link.is_symlink()


def _history_and_results(tmp_path):
    """A history folder as a session leaves it (its history file and its package list) and that session's results."""
    record = TestRecord("t", family="throughput", hardware_key="cpu-a", model="resnet18", mode="train", batch_size=8,
                        dtype="fp32", throughput=5.0, samples=[5.0, 5.1, 4.9], unit="samples/s")
    store = HistoryStore(tmp_path / "history")
    store.append_session([record], "session-1", "2026-11-22T10:00:00+00:00")
    results = write_results(SessionResults({}, [record]), tmp_path / "reports").paths["results"]
    return store, results


def test_output_never_overwrites_a_file_of_the_history_it_reads(tmp_path, capsys):
    store, results = _history_and_results(tmp_path)
    history = str(store.directory)
    (packages,) = (store.directory / "packages").iterdir()
    files = [store.path_for("cpu-a"), packages]
    before = [path.read_bytes() for path in files]
    link = tmp_path / "page.html"
    link.symlink_to(files[0])
    commands = (["history", "render", "--dir", history], ["report", "render", str(results), "--history-dir", history],
                ["report", "merge", str(results), "--history-dir", history])
    for output in (*files, link):
        for command in commands:
            assert main([*command, "-o", str(output)]) == 2, command
            assert "never overwrites an input" in _one_error(capsys, output)
    assert [path.read_bytes() for path in files] == before and link.is_symlink()


def test_output_never_becomes_a_new_history_file_of_the_history_it_reads(tmp_path, capsys):
    store, results = _history_and_results(tmp_path)
    history = str(store.directory)
    link = tmp_path / "page.html"
    link.symlink_to(store.directory / "cpu-z.jsonl")  # a link to a key file that does not exist yet
    commands = (["history", "render", "--dir", history], ["report", "render", str(results), "--history-dir", history],
                ["report", "merge", str(results), "--history-dir", history])
    for output in (store.directory / "cpu-new.jsonl", link):
        for command in commands:
            assert main([*command, "-o", str(output)]) == 2, command
            error = _one_error(capsys, output)
            assert f"would be read as a hardware key's history of {history}" in error and "-o dashboard.html" in error
    assert store.hardware_keys() == ["cpu-a"] and not os.path.lexists(store.directory / "cpu-z.jsonl")
    for allowed in (store.directory / "page.html", store.directory / ".hidden.jsonl"):  # names the history never reads
        assert main(["history", "render", "--dir", history, "-o", str(allowed)]) == 0
        assert allowed.is_file()


@pytest.mark.timeout(60)
def test_output_onto_a_fifo_or_a_device_is_refused_and_left_as_it_is(tmp_path, capsys, character_device):
    store, results = _history_and_results(tmp_path)
    fifo = tmp_path / "fifo.html"
    os.mkfifo(fifo)
    to_fifo, to_device = tmp_path / "to-fifo.html", tmp_path / "to-device.html"
    to_fifo.symlink_to(fifo)
    to_device.symlink_to(character_device)
    commands = (["report", "render", str(results)], ["report", "merge", str(results)],
                ["report", "compare", str(results), str(results)], ["history", "render", "--dir", str(store.directory)])
    for output, kind in ((fifo, "a FIFO"), (to_fifo, "a FIFO"), (to_device, "a character device")):
        for command in commands:
            assert main([*command, "-o", str(output)]) == 2, command
            assert f"is {kind}" in _one_error(capsys, output)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and to_fifo.is_symlink() and to_device.is_symlink()
    assert stat.S_ISCHR(os.stat(character_device).st_mode)


def test_merge_with_malformed_records_is_one_line(tmp_path, capsys):
    good = write_results(SessionResults({}, [TestRecord("t", hardware_key="k", throughput=1.0)]), tmp_path / "r").paths
    data = json.loads(good["results"].read_text())
    for broken in (None, [1], {"test_id": "t", "throughput": "fast"}, {"test_id": "t", "samples": {"a": 1}}):
        data["records"] = [broken]
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(data))
        assert main(["report", "merge", str(good["results"]), str(bad), "-o", str(tmp_path / "m.html")]) == 2
        _one_error(capsys, bad)
    assert not (tmp_path / "m.html").exists()


# -- diff with the tests' statistics ------------------------------------------------------------------------
SAMPLES = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1]


def _baselines_file(path, entries):
    path.write_text(json.dumps({"schema_version": 1, "hardware_key": "gpu", "device_name": "G", "entries": entries}))
    return str(path)


def test_diff_gates_a_pipeline_on_a_2x_slowdown(tmp_path, capsys):
    a = _baselines_file(tmp_path / "a.json", {"t": {"samples": SAMPLES, "unit": "samples/s"}})
    slow = _baselines_file(tmp_path / "b.json", {"t": {"samples": [s / 2 for s in SAMPLES], "unit": "samples/s"}})
    assert main(["baselines", "diff", a, slow, "--fail-on", "regression"]) == 1
    out = capsys.readouterr().out
    assert "regression" in out and "0.5 " in out and "samples" in out and "1 regressions" in out
    assert main(["baselines", "diff", a, slow]) == 0  # no gate asked for
    assert main(["baselines", "diff", a, slow, "--fail-on", "improvement"]) == 0
    assert main(["baselines", "diff", slow, a, "--fail-on", "improvement"]) == 1
    assert main(["baselines", "diff", slow, a, "--fail-on", "any"]) == 1
    same = _baselines_file(tmp_path / "same.json", {"t": {"samples": SAMPLES}})
    assert main(["baselines", "diff", a, same, "--fail-on", "any"]) == 0
    capsys.readouterr()


def test_diff_uses_the_baselines_noise_and_history(tmp_path, capsys):
    drifting = {"samples": SAMPLES, "history": [100.0, 70.0, 130.0, 100.0]}
    a = _baselines_file(tmp_path / "a.json", {"t": drifting})
    b = _baselines_file(tmp_path / "b.json", {"t": {"samples": [s * 0.8 for s in SAMPLES]}})
    assert main(["baselines", "diff", a, b, "--fail-on", "regression"]) == 0  # 20% is within A's drift
    assert "none" in capsys.readouterr().out


def test_diff_without_samples_compares_medians_and_says_so(tmp_path, capsys):
    a = _baselines_file(tmp_path / "a.json", {"t": {"median": 100.0}, "acc": {"accuracy": 0.9}})
    b = _baselines_file(tmp_path / "b.json", {"t": {"median": 50.0}, "acc": {"accuracy": 0.9}})
    assert main(["baselines", "diff", a, b, "--fail-on", "regression", "--tolerance", "0.1"]) == 1
    out = capsys.readouterr().out
    assert "medians only" in out and "accuracy only" in out
    assert main(["baselines", "diff", a, b, "--tolerance", "2"]) == 2  # argparse: not a fraction
    assert "not a fraction" in capsys.readouterr().err


def _entry(level: float, sessions: int, cpu: bool) -> dict:
    samples = [level * (1 + 0.002 * (i % 5 - 2)) for i in range(10)]
    identity = {"cpu_brand": "AMD EPYC", "cpu_family": 26} if cpu else {"gpu_name": "NVIDIA H100 80GB HBM3"}
    return {"samples": samples, "history": [level] * sessions, "identity": identity}


def test_diff_judges_with_the_tests_rule_provisional_cap_and_cpu_tolerance():
    from hwregress.cli.baselines import diff_row
    from hwregress.judge.tolerances import Tolerances

    tolerances = Tolerances()
    # a CPU baseline of one session: provisional, only a change beyond the 25% cap counts
    row = diff_row("k", _entry(100.0, 1, cpu=True), _entry(80.0, 1, cpu=True), None, tolerances)
    assert row.direction == "none" and row.threshold == 0.25
    # three sessions: the CPU tolerance (15%) applies, and a 20% drop is a regression
    row = diff_row("k", _entry(100.0, 3, cpu=True), _entry(80.0, 1, cpu=True), None, tolerances)
    assert row.direction == "regression" and row.threshold == 0.15
    # an accelerator's baseline of three sessions: 5%
    row = diff_row("k", _entry(100.0, 3, cpu=False), _entry(90.0, 1, cpu=False), None, tolerances)
    assert row.direction == "regression" and row.threshold == 0.05
    # an explicit --tolerance wins over the device default, not over the provisional cap
    assert (diff_row("k", _entry(100.0, 3, cpu=True), _entry(90.0, 1, cpu=True), 0.05, tolerances).direction
            == "regression")
    assert diff_row("k", _entry(100.0, 2, cpu=True), _entry(90.0, 1, cpu=True), 0.05, tolerances).threshold == 0.25


# -- the output: a reader that goes away, a disk that fills ---------------------------------------------------
def _inputs(tmp_path) -> dict[str, str]:
    """A baselines folder (cpu-a, cpu-b), a history, and two results files: every command's inputs."""
    store = _store(tmp_path)
    results = []
    for name, throughput in (("a", 10.0), ("b", 9.0)):
        record = TestRecord("t", family="throughput", hardware_key="cpu-a", model="resnet18", mode="train",
                            batch_size=8, dtype="fp32", throughput=throughput, unit="samples/s", device="cpu",
                            samples=[throughput * f for f in (0.99, 1.0, 1.01)])
        written = write_results(SessionResults({"hostname": name}, [record]), tmp_path / name)
        results.append(str(written.paths["results"]))
        HistoryStore(tmp_path / "history").append_session([record], f"s-{name}", f"2026-11-2{len(results)}T10:00:00")
    return {"baselines": str(store.directory), "history": str(tmp_path / "history"), "a": results[0],
            "b": results[1], "tmp": str(tmp_path)}


EVERY_COMMAND = {
    "baselines list": ["baselines", "list", "--dir", "{baselines}"],
    "baselines show": ["baselines", "show", "cpu-b", "--dir", "{baselines}"],
    "baselines diff": ["baselines", "diff", "{baselines}/cpu-a.json", "{baselines}/cpu-b.json"],
    "report render": ["report", "render", "{a}", "-o", "{tmp}/render.html"],
    "report merge": ["report", "merge", "{a}", "{b}", "-o", "{tmp}/merge.html"],
    "report compare": ["report", "compare", "{a}", "{b}", "-o", "{tmp}/compare.html"],
    "history": ["history", "--dir", "{history}"],
    "history json": ["history", "--dir", "{history}", "--format", "json"],
    "history render": ["history", "render", "--dir", "{history}", "-o", "{tmp}/dashboard.html"],
}


def _hwregress(*argv: str, **streams) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hwregress", *argv], stderr=subprocess.PIPE, text=True, timeout=120,
                          **streams)


@pytest.mark.parametrize("command", list(EVERY_COMMAND))
def test_every_command_ends_quietly_when_the_reader_of_its_output_has_gone(tmp_path, command):
    inputs = _inputs(tmp_path)
    argv = [part.format(**inputs) for part in EVERY_COMMAND[command]]
    assert _hwregress(*argv, stdout=subprocess.DEVNULL).returncode in (0, 1)  # what it does with a reader
    reader, writer = os.pipe()
    os.close(reader)  # `| true`: the reader ended before the first line
    try:
        done = _hwregress(*argv, stdout=writer)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (0, "")
    written = [Path(part) for part in argv if part.endswith(".html")]
    assert all(path.stat().st_size > 0 for path in written)  # the work was done; only the words were not read


def test_history_piped_into_a_reader_that_stops_after_one_line_ends_quietly(tmp_path, capsys):
    rows = [{"v": HISTORY_ROW_VERSION, "session": f"s{session}", "time": f"2026-03-{session + 1:02d}T02:00:00",
             "test_id": f"bench_tests/test_throughput.py::test_train[model{test}]", "hardware_key": "cpu-a",
             "median": 100.0 + (session * 7 + test) % 3, "unit": "samples/s"}
            for session in range(12) for test in range(200)]
    directory = HistoryStore(tmp_path / "history").append("cpu-a", rows).parent
    assert main(["history", "--dir", str(directory)]) == 0
    size = len(capsys.readouterr().out.encode())
    child = subprocess.Popen([sys.executable, "-m", "hwregress", "history", "--dir", str(directory)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    assert size > 2 * fcntl.fcntl(child.stdout.fileno(), fcntl.F_GETPIPE_SZ)  # it cannot all wait in the pipe
    assert child.stdout.readline().startswith(b"cpu-a")
    child.stdout.close()  # `| head -1`
    err = child.stderr.read()
    assert (child.wait(timeout=120), err) == (0, b"")


def test_output_to_a_full_disk_is_one_error_line_that_names_stdout(tmp_path):
    inputs = _inputs(tmp_path)
    with open("/dev/full", "w") as full:
        done = _hwregress("history", "--dir", inputs["history"], stdout=full)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["hwregress: stdout: No space left on device (the output could not be "
                                        "written: check where it goes, e.g. its free space)"]


def test_a_gate_keeps_its_status_when_the_reader_of_the_output_has_gone(tmp_path):
    """`history --fail-on regression | head` must still fail on a regression: the gate's status is the command's,
    not the pipe's."""
    from test_history_cli import history_dir, step_rows

    directory = history_dir(tmp_path / "history", step_rows())
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = _hwregress("history", "--dir", str(directory), "--fail-on", "regression", stdout=writer)
    finally:
        os.close(writer)
    assert done.returncode == 1
    assert "regression" in done.stderr and "Traceback" not in done.stderr
