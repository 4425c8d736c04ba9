"""Which store a session and the command line use (:func:`hwregress.store.database.store_url`): the default SQLite
file is built from the report folder as a path, so that no character of a folder's name (``?``, ``#``, ``%20``)
makes it another file; a ``--store`` that would store nothing (empty, an in-memory SQLite database) is refused in
one line naming the value and the fix, never taken for the default or for a store."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import make_url
from support.store_results import results_document

from hwregress.cli import main
from hwregress.store.database import open_store, store_url


@pytest.mark.parametrize("folder", ["r?x", "r#x", "a%20b", "a b", "u@h:1", "p%3Fq"])
def test_the_default_store_is_the_file_in_the_report_folder_whatever_its_name(tmp_path, folder):
    report_dir = tmp_path / "d" / folder
    url = store_url(None, {}, report_dir)
    assert make_url(url).database == str(report_dir / "hwregress.sqlite")
    open_store(url).close()
    assert (report_dir / "hwregress.sqlite").is_file()
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == [folder]  # nothing beside the report folder


@pytest.mark.parametrize(("option", "environ", "said"), [
    ("", {}, "--store='': an empty URL names no store"),
    ("  ", {"HWREGRESS_STORE": "sqlite:///x.sqlite"}, "--store='  ': an empty URL names no store"),
    ("sqlite://", {}, "--store='sqlite://': an in-memory SQLite database keeps nothing"),
    ("sqlite:///:memory:", {}, "--store='sqlite:///:memory:': an in-memory SQLite database keeps nothing"),
    ("sqlite:///file::memory:?uri=true", {}, "--store='sqlite:///file::memory:?uri=true': an in-memory SQLite"),
    (None, {"HWREGRESS_STORE": "sqlite://"}, "HWREGRESS_STORE='sqlite://': an in-memory SQLite database keeps"),
])
def test_a_store_url_that_stores_nothing_is_refused_in_one_line(option, environ, said):
    with pytest.raises(ValueError) as raised:  # hwregress.store.store_errors.NoStoreUrl
        store_url(option, environ, "reports")
    message = str(raised.value)
    assert message.startswith(said) and "\n" not in message and "--store=none" in message, message


def test_the_command_line_refuses_an_empty_or_in_memory_store(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HWREGRESS_STORE", raising=False)
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("vm-1-20261127T012215Z")))
    for argv in (["store", "push", str(results), "--store="], ["store", "push", str(results), "--store=sqlite://"],
                 ["store", "export", "--dir", "out", "--store="], ["history", "--store="],
                 ["history", "--store=sqlite://"], ["report", "compare", "a", "b", "-o", "d.html", "--store="]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("hwregress: --store=") and err.count("\n") == 1, err
        assert "names no store" in err or "in-memory" in err, err
    assert not (tmp_path / "reports").exists() and not list(tmp_path.glob("*.sqlite"))
    assert main(["history", "--store"]) == 2  # a bare --store is still the default store (here: none there)
    assert "no such SQLite store" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["", "sqlite://"])
def test_a_session_refuses_an_empty_or_in_memory_store_before_it_runs(hw_project, value):
    result = hw_project.run(f"--store={value}", inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = "\n".join(result.stderr.lines)
    assert f"--store='{value}'" in said and "--store=none" in said, said
    assert not (hw_project.path / "reports").exists()
