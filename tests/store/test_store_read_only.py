"""The readers read and never create or write: ``store fleet`` and ``store export`` on a SQLite path that is not there
say ``no such SQLite store`` (exit status 2) as ``history --store`` does, and create nothing; a store on a read-only
mount (a bind mount remounted read-only: what CI's root cannot write either) is read by every reader as it is read
where it was written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.read_only import read_only_view
from support.store_migrations import migrate, revision
from support.store_results import results_document

from hwregress.cli import main
from hwregress.store.database import open_store

NAME = "vm-1-20261127T012215Z"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("argv", [["store", "fleet", "-o", "fleet.html"], ["store", "export", "--dir", "exported"],
                                  ["history"], ["report", "compare", "a", "b", "-o", "d.html"]],
                         ids=["fleet", "export", "history", "compare"])
def test_a_reader_given_a_sqlite_path_that_is_not_there_says_so_and_creates_nothing(tmp_path, capsys, monkeypatch,
                                                                                      argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HWREGRESS_STORE", raising=False)
    missing = tmp_path / "nowhere" / "s.sqlite"
    for store in ([f"--store=sqlite:///{missing}"], ["--store"] if argv[0] != "store" else []):
        status, out, err = run(capsys, *argv, *store)
        assert status == 2 and out == "" and err.count("\n") == 1, (store, out, err)
        assert ": no such SQLite store (give the --store URL the sessions were pushed to" in err, err
    assert list(tmp_path.iterdir()) == []  # no store, no folder, no page


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a folder, the same folder bind-mounted read-only): what is written into the first is read through the second,
    where nothing can be created or written, by root either. Skipped where this process may not mount."""
    writable = tmp_path / "writable"
    writable.mkdir()
    with read_only_view(writable, tmp_path / "read-only") as read_only:
        with pytest.raises(OSError):
            (read_only / "probe").write_text("x")
        yield writable, read_only


def test_every_reader_reads_a_store_on_a_read_only_mount(read_only_folder, tmp_path, capsys):
    writable, read_only = read_only_folder
    for day in ("27", "28"):
        results = tmp_path / f"results-{day}.json"
        results.write_text(json.dumps(results_document(f"vm-1-202611{day}T012215Z",
                                                       started=f"2026-11-{day}T01:22:15+00:00")))
        assert run(capsys, "store", "push", str(results), "--store", f"sqlite:///{writable / 's.sqlite'}")[0] == 0
    assert sorted(path.name for path in read_only.iterdir()) == ["s.sqlite"]  # closed: no -wal, no -shm
    before = (read_only / "s.sqlite").read_bytes()
    url, original = f"sqlite:///{read_only / 's.sqlite'}", f"sqlite:///{writable / 's.sqlite'}"

    for argv in (["history", "--format", "json"], ["history"]):
        status, out, err = run(capsys, *argv, "--store", url)
        assert status == 0 and err == "", err
        assert out.replace(url, "URL") == run(capsys, *argv, "--store", original)[1].replace(original, "URL")
    status, out, err = run(capsys, "store", "export", "--dir", str(tmp_path / "exported"), "--store", url)
    assert status == 0 and "6 rows exported" in out, err
    status, _, err = run(capsys, "store", "fleet", "-o", str(tmp_path / "fleet.html"), "--store", url)
    assert status == 0 and "runner-1" in (tmp_path / "fleet.html").read_text(), err
    status, _, err = run(capsys, "report", "compare", "vm-1-20261127T012215Z", "vm-1-20261128T012215Z",
                         "-o", str(tmp_path / "diff.html"), "--store", url)
    assert status == 0, err
    status, _, err = run(capsys, "history", "render", "-o", str(tmp_path / "h.html"), "--store", url)
    assert status == 0, err
    assert (read_only / "s.sqlite").read_bytes() == before

    live = open_store(original)  # a writer holds the store open: its -wal and -shm are there, its log is read too
    try:
        live.push(results_document("vm-1-20261129T012215Z", started="2026-11-29T01:22:15+00:00"))
        assert {"s.sqlite-wal", "s.sqlite-shm"} <= {path.name for path in read_only.iterdir()}
        status, _, err = run(capsys, "report", "compare", "vm-1-20261128T012215Z", "vm-1-20261129T012215Z",
                             "-o", str(tmp_path / "live.html"), "--store", url)
        assert status == 0, err
    finally:
        live.close()

    # a writer on a read-only store is still one line saying so
    status, _, err = run(capsys, "store", "push", str(tmp_path / "results-27.json"), "--store", url)
    assert status == 2 and err.count("\n") == 1 and "s.sqlite or its folder is read-only" in err, err


def test_a_read_only_store_of_an_older_revision_is_read_as_it_is(read_only_folder, tmp_path, capsys):
    """A store at revision 0001 (before the bisection tables) on a read-only mount: nothing can migrate it, so the
    readers read it as it is; its sessions read as they were and it has no bisections (before, every reader failed:
    "the file is read-only")."""
    writable, read_only = read_only_folder
    original, url = f"sqlite:///{writable / 's.sqlite'}", f"sqlite:///{read_only / 's.sqlite'}"
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document(NAME)))
    assert run(capsys, "store", "push", str(results), "--store", original)[0] == 0
    migrate(original, "0001")
    before = (read_only / "s.sqlite").read_bytes()

    status, out, err = run(capsys, "history", "--format", "json", "--store", url)
    assert status == 0 and err == "" and NAME in out, err
    status, out, err = run(capsys, "store", "bisections", "--store", url)
    assert (status, out, err) == (0, f"no bisection in {url}\n", "")
    status, out, err = run(capsys, "store", "bisection", "0123", "--store", url)
    assert status == 2 and "no bisection '0123' in the store" in err, err
    assert (read_only / "s.sqlite").read_bytes() == before and revision(original) == "0001"

    migrate(original, "base")  # no revision (an empty store): nothing to read as it is, and nothing may migrate it
    status, _, err = run(capsys, "history", "--store", url)
    assert status == 2 and err.count("\n") == 1 and "read-only" in err, err
