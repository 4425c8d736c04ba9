"""The fleet store's migrations create exactly the tables :mod:`hwregress.store.tables` declares, on an empty SQLite
file and an empty PostgreSQL database (alembic's compare_metadata finds no difference); opening again migrates
nothing."""

from __future__ import annotations

import pytest
import sqlalchemy
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from hwregress.store.database import open_store
from hwregress.store.tables import metadata


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
    assert sorted(sqlalchemy.inspect(sqlalchemy.create_engine(url)).get_table_names()) == [
        "alembic_version", "figures", "hosts", "sessions"]
    assert differences(url) == []
    assert revision(url) == "0001"
    open_store(url).close()  # at head: looked at, not migrated again
    assert revision(url) == "0001"


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
