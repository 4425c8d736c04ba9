"""``python -m hwregress store push|import|export`` end to end on a real SQLite file: push is idempotent and says so,
a history folder imports by session, the export reads back with the history reader, and bad inputs or an unreachable
store are one line with exit status 2."""

from __future__ import annotations

import json

from support.store_results import results_document

from hwregress.cli import main
from hwregress.store.history import HistoryStore, read_history


def test_push_import_and_export_end_to_end(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("vm-1-20261127T012215Z")))
    assert main(["store", "push", str(results), "--store", url]) == 0
    assert main(["store", "push", str(results), "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{results}: session vm-1-20261127T012215Z: inserted (6 figures)",
                   f"{results}: session vm-1-20261127T012215Z: already present (6 figures), unchanged"]

    assert main(["store", "export", "--dir", str(tmp_path / "exported"), "--store", url]) == 0
    read = read_history(tmp_path / "exported" / "amd-epyc-f26m2-2t.jsonl")
    assert read.warnings == [] and len(read.rows) == 3
    assert {row["session"] for row in read.rows} == {"vm-1-20261127T012215Z"}
    assert sorted(row["median"] for row in read.rows) == [10.0, 11.0, 12.0]
    assert main(["store", "export", "--dir", str(tmp_path / "exported"), "--store", url]) == 0  # nothing twice
    assert len(read_history(tmp_path / "exported" / "amd-epyc-f26m2-2t.jsonl").rows) == 3

    # the exported history imports into a second store as the same session, figures without samples
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    capsys.readouterr()
    assert main(["store", "import", str(tmp_path / "exported"), "--store", other]) == 0
    assert "session vm-1-20261127T012215Z: inserted (3 figures)" in capsys.readouterr().out
    assert main(["store", "export", "--dir", str(tmp_path / "again"), "--store", other]) == 0
    again = HistoryStore(tmp_path / "again").read("amd-epyc-f26m2-2t")
    assert [(r["test_id"], r["median"], r["q1"], r["q3"]) for r in again.rows] == [
        (r["test_id"], r["median"], r["q1"], r["q3"]) for r in read.rows]


def test_bad_inputs_and_an_unreachable_store_are_one_line(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    not_results = tmp_path / "other.json"
    not_results.write_text('{"entries": {}}')
    cases = [(["store", "push", str(tmp_path / "missing.json"), "--store", url], "cannot open"),
             (["store", "push", str(not_results), "--store", url], "is not a results.json"),
             (["store", "push", str(not_results), "--store", "postgresql+psycopg://u:pw@127.0.0.1:1/db"],
              "is not a results.json"),  # inputs are checked before the store is opened
             (["store", "export", "--dir", str(tmp_path), "--store", "nosuch://x"], "no SQLAlchemy dialect")]
    for argv, said in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and err.startswith("hwregress: ")
