"""Alembic's environment for the fleet store: online only, on the connection :func:`hwregress.store.database.upgrade`
passes in ``config.attributes["connection"]`` (inside its transaction)."""

from __future__ import annotations

from alembic import context

from hwregress.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("hwregress.store.migrations runs online only, on a connection given in "
                       "config.attributes['connection'] (hwregress.store.database.upgrade)")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
