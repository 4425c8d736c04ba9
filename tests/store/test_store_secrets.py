"""A store URL's secrets are never shown nor kept: the password of its user part and every secret query parameter
(``?password=``, ``?sslpassword=``, ...: libpq's way to give them) are ``***`` in the terminal, results.json, the
report, the archives, the store's own ``sessions.meta`` and every error of the command line; one function masks them
all (:func:`hwregress.store.database.masked`)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import make_url
from support.store_results import results_document

from hwregress.cli import main
from hwregress.store.database import masked, open_store
from hwregress.store.store_errors import StoreUnavailable

SECRETS = ("S3cret", "K3y", "T0ken", "pw")


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql+psycopg://ci:pw@db/h", "postgresql+psycopg://ci:***@db/h"),
    ("postgresql+psycopg://user@/db?host=/run/pg&password=S3cret",
     "postgresql+psycopg://user@/db?host=/run/pg&password=***"),
    ("postgresql+psycopg://u:p%40ss@/db?host=/run/pg&pass%77ord=S3cret&password",
     "postgresql+psycopg://u:***@/db?host=/run/pg&pass%77ord=***&password"),
    ("postgresql://u:pw@db/h?sslpassword=K3y&sslmode=require&PASSWORD=S3cret&api_token=T0ken",
     "postgresql://u:***@db/h?sslpassword=***&sslmode=require&PASSWORD=***&api_token=***"),
    ("postgresql://u@db/h?password=S3cret&password=K3y", "postgresql://u@db/h?password=***&password=***"),
    # texts SQLAlchemy cannot read (a port that is no number): masked all the same
    ("postgresql+psycopg://ci:pw@db:port/h?password=S3cret&sslpassword=K3y",
     "postgresql+psycopg://ci:***@db:port/h?password=***&sslpassword=***"),
    ("not a url: ://u:pw@h/?password=S3cret", "not a url: ://u:***@h/?password=***"),
    ("sqlite:///reports/hwregress.sqlite", "sqlite:///reports/hwregress.sqlite"),
])
def test_every_secret_of_a_store_url_is_masked(url, shown):
    assert masked(url) == shown
    assert not any(secret in masked(url) for secret in SECRETS)


def test_an_unreachable_store_with_a_query_password_is_one_line_without_it(tmp_path, capsys):
    pytest.importorskip("psycopg")
    url = f"postgresql+psycopg://ci@/hwregress?host={tmp_path}&password=S3cret&sslpassword=K3y"  # no server there
    with pytest.raises(StoreUnavailable) as raised:
        open_store(url)
    assert "S3cret" not in str(raised.value) and "K3y" not in str(raised.value) and "password=***" in str(raised.value)
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("vm-1-20261127T012215Z")))
    for argv in (["store", "push", str(results)], ["store", "export", "--dir", str(tmp_path / "out")],
                 ["history"], ["report", "compare", "a", "b", "-o", str(tmp_path / "d.html")]):
        assert main([*argv, "--store", url]) == 2
        err = capsys.readouterr().err
        assert "password=***" in err and err.count("\n") == 1, err
        assert "S3cret" not in err and "K3y" not in err, err


@pytest.mark.needs_extra
def test_store_export_and_fleet_name_a_postgresql_store_without_its_query_password(postgres_database, tmp_path,
                                                                                     capsys):
    url = with_query_secrets(postgres_database)
    results = tmp_path / "results.json"
    results.write_text(json.dumps(results_document("vm-1-20261127T012215Z")))
    assert main(["store", "push", str(results), "--store", url]) == 0
    assert main(["store", "export", "--dir", str(tmp_path / "out"), "--store", url]) == 0
    assert main(["store", "fleet", "-o", str(tmp_path / "fleet.html"), "--store", url]) == 0
    out = capsys.readouterr().out
    assert out.count("&password=***&sslpassword=***") == 2, out  # "exported ... from URL", "fleet page ... from URL"
    assert "S3cret" not in out + (tmp_path / "fleet.html").read_text()


def with_query_secrets(url: str) -> str:
    """``url`` (a pgserver database's: its user, no password, the socket folder as ``?host=``) with its password
    given as query parameters instead (the server trusts local users: any password opens it)."""
    parsed = make_url(url).set(password=None).update_query_dict({"password": "S3cret", "sslpassword": "K3y"})
    return parsed.render_as_string(hide_password=False)


@pytest.mark.slow
@pytest.mark.needs_extra
def test_a_session_into_postgresql_with_a_query_password_never_shows_or_keeps_it(hw_project, postgres_database):
    url = with_query_secrets(postgres_database)
    session = hw_project.run(f"--store={url}")
    session.assert_outcomes(passed=2)
    [line] = [line for line in session.stdout.lines if line.startswith("store:")]
    assert " pushed (" in line and "password=***" in line and "sslpassword=***" in line, line
    assert "S3cret" not in session.stdout.str() + session.stderr.str()
    assert f"--store={masked(url)}" in hw_project.results["meta"]["args"]
    written = [path for path in (hw_project.path / "reports").rglob("*") if path.is_file()]
    assert {path.name for path in written} >= {"results.json", "report.html"}
    assert any(path.parent.name == "archive" for path in written)
    leaked = [str(path) for path in written if b"S3cret" in path.read_bytes() or b"K3y" in path.read_bytes()]
    assert leaked == []
    store = open_store(postgres_database)
    try:
        [stored] = store.sessions()
        assert "S3cret" not in json.dumps(stored["meta"]) and f"--store={masked(url)}" in stored["meta"]["args"]
    finally:
        store.close()
