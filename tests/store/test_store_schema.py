"""The fleet store's migrations create exactly the tables :mod:`hwregress.store.tables` declares, on an empty SQLite
file and an empty PostgreSQL database (alembic's compare_metadata finds no difference); opening again migrates
nothing; a store of the first schema opens migrated to the newest with its sessions, and each migration goes back; a
reader reads a store of the first schema at its revision and leaves it there (a writer migrates it)."""

from __future__ import annotations

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from support.store_migrations import migrate, revision
from support.store_results import results_document

from hwregress.cli import main
from hwregress.store.database import known_revisions, open_store
from hwregress.store.tables import metadata

HEAD = "0002"
FIRST_TABLES = ["alembic_version", "figures", "hosts", "sessions"]  # migration 0001's


def differences(url: str) -> list:
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True,
                                                                   "compare_server_default": True})
            return compare_metadata(context, metadata)
    finally:
        engine.dispose()


def check_upgrade_from_nothing(url: str) -> None:
    assert revision(url) is None
    open_store(url).close()
    assert tables(url) == sorted([*FIRST_TABLES, "bisection_probes", "bisections"])
    assert differences(url) == []
    assert revision(url) == HEAD
    open_store(url).close()  # at head: looked at, not migrated again
    assert revision(url) == HEAD


def tables(url: str) -> list[str]:
    engine = sqlalchemy.create_engine(url)
    found = sorted(sqlalchemy.inspect(engine).get_table_names())
    engine.dispose()
    return found


def check_first_schema_upgraded_and_downgraded(url: str) -> None:
    store = open_store(url)
    store.push(results_document("vm-1-20261127T012215Z"))
    store.close()
    migrate(url, "0001")  # each later migration goes back: a store of the first schema, holding a session
    assert tables(url) == FIRST_TABLES and revision(url) == "0001"
    store = open_store(url)  # migrated on open, the session kept
    assert revision(url) == HEAD and differences(url) == []
    assert [s["name"] for s in store.sessions()] == ["vm-1-20261127T012215Z"] and len(store.figures()) == 6
    assert store.bisections() == []
    store.close()

def test_sqlite_upgraded_from_nothing_has_the_declared_tables(tmp_path):
    check_upgrade_from_nothing(f"sqlite:///{tmp_path / 'hwregress.sqlite'}")


@pytest.mark.needs_extra
def test_postgresql_upgraded_from_nothing_has_the_declared_tables(postgres_database):
    check_upgrade_from_nothing(postgres_database)


def test_a_declared_column_the_migrations_lack_is_found(tmp_path):
    url = f"sqlite:///{tmp_path / 'hwregress.sqlite'}"
    open_store(url).close()
    column = sqlalchemy.Column("extra", sqlalchemy.Integer)
    metadata.tables["figures"].append_column(column)
    try:
        assert [d[0] for d in differences(url)] == ["add_column"]
    finally:
        metadata.tables["figures"]._columns.remove(column)
    assert differences(url) == []


def test_a_sqlite_store_of_the_first_schema_is_migrated_on_open_and_the_migration_goes_back(tmp_path):
    check_first_schema_upgraded_and_downgraded(f"sqlite:///{tmp_path / 'hwregress.sqlite'}")


@pytest.mark.needs_extra
def test_a_postgresql_store_of_the_first_schema_is_migrated_on_open_and_the_migration_goes_back(postgres_database):
    check_first_schema_upgraded_and_downgraded(postgres_database)


def test_every_older_revision_differs_from_the_declared_tables_only_by_whole_tables(tmp_path):
    """A reader reads a store of an older revision as it is (database.readable_as_it_is), which is right while each
    migration only adds tables: a migration that alters a column of an older table fails this."""
    url = f"sqlite:///{tmp_path / 'hwregress.sqlite'}"
    open_store(url).close()
    older = list(known_revisions()[1:])
    assert known_revisions()[0] == HEAD and older == ["0001"]
    for to in older:
        migrate(url, to)
        found = differences(url)
        added = {difference[1].name for difference in found if difference[0] == "add_table"}
        others = [difference for difference in found
                  if difference[0] != "add_table" and not (difference[0] == "add_index"
                                                           and difference[1].table.name in added)]
        assert added and others == [], (to, found)


def check_a_reader_leaves_an_older_revision_as_it_is(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(url)
    store.push(results_document("vm-1-20261127T012215Z"))
    store.close()
    migrate(url, "0001")  # the store as the fleet's runners (an older hwregress) still write it
    reader = open_store(url, reading=True)
    try:
        assert [s["name"] for s in reader.sessions()] == ["vm-1-20261127T012215Z"] and len(reader.figures()) == 6
        assert reader.bisections() == [] and reader.bisection("0123") is None
    finally:
        reader.close()
    assert main(["history", "--format", "json", "--store", url]) == 0
    assert "vm-1-20261127T012215Z" in capsys.readouterr().out
    assert revision(url) == "0001" and tables(url) == FIRST_TABLES  # read, not migrated: older writers still write
    open_store(url).close()  # a writer of this hwregress migrates it
    assert revision(url) == HEAD


def test_a_reader_leaves_a_sqlite_store_of_an_older_revision_as_it_is(tmp_path, capsys):
    check_a_reader_leaves_an_older_revision_as_it_is(f"sqlite:///{tmp_path / 'hwregress.sqlite'}", capsys)


@pytest.mark.needs_extra
def test_a_reader_leaves_a_postgresql_store_of_an_older_revision_as_it_is(postgres_database, capsys):
    check_a_reader_leaves_an_older_revision_as_it_is(postgres_database, capsys)
