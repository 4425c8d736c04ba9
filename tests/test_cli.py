"""``python -m hwregress``: baselines list/show/diff and report merge."""

from __future__ import annotations

import json
import subprocess
import sys

from hwregress.baselines import BaselineStore
from hwregress.cli import main
from hwregress.report import write_outputs
from hwregress.results import SessionResults, TestRecord


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
    paths = write_outputs(SessionResults({}, [record]), tmp_path / "reports")
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
        files.append(str(write_outputs(SessionResults({"hostname": key}, [record]), tmp_path / key)["results"]))
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
