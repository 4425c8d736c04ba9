"""A store's schema revision, read and moved as Alembic's command line would: for self-tests of the migrations and of
stores left at an older revision."""

from __future__ import annotations

import sqlalchemy
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext

from hwregress.store.database import MIGRATIONS


def revision(url: str) -> str | None:
    """The revision of the database at ``url``; None where it has none (empty, or never migrated)."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def migrate(url: str, to: str) -> None:
    """Migrate the database at ``url`` to revision ``to`` (up or down; ``"base"``: before the first)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            current = MigrationContext.configure(connection).get_current_revision()
            down = to == "base" or (current is not None and to < current)
            (command.downgrade if down else command.upgrade)(config, to)
    finally:
        engine.dispose()
