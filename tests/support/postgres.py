"""A real PostgreSQL 16 for the fleet store's self-tests, started by ``pgserver`` (the ``fleet`` extra) in a folder of
its own and stopped at the end; its socket is in that folder, so each xdist worker's server is its own."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FLEET_MISSING = "needs the fleet extra (pgserver, psycopg): pip install '.[fleet]'"


@contextmanager
def postgres_server(folder: Path) -> Iterator[str]:
    """Start a PostgreSQL server with its data in ``folder``; yields its SQLAlchemy URL (psycopg 3 driver).

    Raises:
        ImportError: pgserver is not installed.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs' warning that XDG_RUNTIME_DIR is unset (CI containers)
        import pgserver

        server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield server.get_uri().replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        server.cleanup()


def fresh_database(url: str, name: str) -> str:
    """Create the empty database ``name`` on the server of ``url``; returns its URL."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    engine.dispose()
    return str(sqlalchemy.make_url(url).set(database=name).render_as_string(hide_password=False))
