"""The fleet store's migrations create exactly the tables :mod:`hwregress.store.tables` declares, on an empty SQLite
file and an empty PostgreSQL database (alembic's compare_metadata finds no difference); opening again migrates
nothing; a store of the first schema opens migrated to the newest with its sessions, and each migration goes back."""

from __future__ import annotations

import pytest
import sqlalchemy
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from support.store_results import results_document

from hwregress.store.database import MIGRATIONS, open_store
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


def revision(url: str) -> str | None:
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as connection:
        found = MigrationContext.configure(connection).get_current_revision()
    engine.dispose()
    return found


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


def migrate(url: str, to: str) -> None:
    """Migrate the database at ``url`` to revision ``to`` (up or down), as Alembic's command line would."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        current = MigrationContext.configure(connection).get_current_revision()
        (command.downgrade if current is not None and to < current else command.upgrade)(config, to)
    engine.dispose()


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
