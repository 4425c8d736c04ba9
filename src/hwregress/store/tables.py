"""The fleet store's schema (:mod:`hwregress.store.database`): five tables in SQLAlchemy Core, portable to SQLite and
PostgreSQL; docs/store.md, 'Schema' describes each column.

- ``hosts``: one row per machine, ``host_id`` stable across renames (:func:`hwregress.store.session_rows.host_id`),
  its hostnames in ``aliases``;
- ``sessions``: one row per pytest session, ``name`` (``results.json``'s ``meta.session``) unique, so that a second
  push of a session inserts nothing;
- ``figures``: one row per judged figure of a test (its throughput, latency, peak memory, ...), unique per session,
  test and metric, deleted with its session;
- ``bisections``: one row per ``python -m hwregress bisect`` (migration 0002), ``status`` "running" until it finishes,
  its final JSON document in ``document``;
- ``bisection_probes``: one row per probe of a bisection, unique per bisection and number (1 the first probe), each
  stored as it ends, deleted with its bisection.

The migrations (``migrations/versions``) create exactly these tables; a self-test compares them
(tests/store/test_store_schema.py). A change here is a new migration there. :func:`owned_by_hwregress` says whether a
database holding some tables is hwregress's store (or empty), or another application's, which hwregress never writes.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

HOST_ID_LENGTH = 512  # characters of a host id (migration 0001): 12 GPU UUIDs joined

# named constraints, so that a later migration can drop or alter them by name on either engine
metadata = MetaData(naming_convention={
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
})

hosts = Table(
    "hosts", metadata,
    Column("host_id", String(HOST_ID_LENGTH), primary_key=True),  # GPU UUIDs joined, else machine id, else hostname
    Column("aliases", JSON, nullable=False),  # list of hostnames seen
    Column("hardware_key", String(200)),
    Column("first_seen", DateTime(timezone=True), nullable=False),
    Column("last_seen", DateTime(timezone=True), nullable=False),
)

sessions = Table(
    "sessions", metadata,
    Column("id", String(36), primary_key=True),  # UUIDv7, text
    Column("name", String(300), nullable=False, unique=True),  # meta.session: a push is idempotent by it
    Column("host_id", String(HOST_ID_LENGTH), ForeignKey("hosts.host_id"), nullable=False),
    Column("hostname", String(300)),
    Column("hardware_key", String(200)),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("exitstatus", Integer),
    Column("interrupted", Boolean, nullable=False),
    Column("git_sha", String(64)),
    Column("git_branch", String(300)),
    Column("ci_build_url", Text),
    Column("environment", JSON, nullable=False),  # {device: software fingerprint}
    Column("meta", JSON, nullable=False),  # results.json's meta as it was
    Column("pushed_at", DateTime(timezone=True), nullable=False),
    Index(None, "hardware_key", "started_at"),
    Index(None, "host_id", "started_at"),
)

figures = Table(
    "figures", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("session_id", String(36), ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    Column("test_id", Text, nullable=False),
    Column("hardware_key", String(200)),
    Column("device_name", String(300)),
    Column("family", String(64)),
    Column("model", String(200)),
    Column("mode", String(64)),
    Column("batch_size", Integer),
    Column("dtype", String(32)),
    Column("device", String(64)),
    Column("metric", String(64), nullable=False),  # throughput, latency, peak_memory, accuracy, speedup, efficiency
    Column("unit", String(64)),
    Column("direction", String(8), nullable=False),  # "higher" or "lower" is better
    Column("samples", JSON),  # the per-round observations, in unit; null: one value only (median)
    Column("median", Float),
    Column("q1", Float),
    Column("q3", Float),
    Column("n", Integer),
    Column("verdict", String(32)),  # the test's verdict (one per test: the same on each of its figures)
    Column("ratio", Float),
    Column("threshold", Float),
    Column("mds", Float),
    Column("p_value", Float),
    Column("baseline_median", Float),
    Column("baseline_recorded_at", String(64)),  # ISO 8601, as the baseline file wrote it
    Column("identity", JSON),  # the hardware identity (hwregress.hardware.identity)
    Column("diagnosis", JSON),  # list of likely causes, most likely first
    UniqueConstraint("session_id", "test_id", "metric", name="uq_figures_session_test_metric"),
    Index(None, "hardware_key", "test_id"),
)

bisections = Table(
    "bisections", metadata,
    Column("id", String(36), primary_key=True),  # a UUID, text: the caller's
    Column("hostname", String(300)),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("kind", String(16), nullable=False),  # what the candidates are: stacks, commits, env-steps
    Column("candidates", JSON, nullable=False),  # their ids, good endpoint first
    Column("labels", JSON, nullable=False),  # their labels, as many
    Column("settings", JSON, nullable=False),  # pytest_args, threshold, looks, work_dir
    Column("status", String(64), nullable=False),  # "running", then the search's status
    Column("exit_code", Integer),
    Column("culprit", Text),
    Column("last_good", Text),
    Column("first_bad", Text),
    Column("seconds", Float),
    Column("document", JSON),  # the final JSON document (hwregress.cli.bisect.bisection_json); null while running
    Index(None, "started_at"),
)

bisection_probes = Table(
    "bisection_probes", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("bisection_id", String(36), ForeignKey("bisections.id", ondelete="CASCADE"), nullable=False),
    Column("number", Integer, nullable=False),  # 1 the first probe
    Column("candidate", Text, nullable=False),
    Column("reference", Text, nullable=False),
    Column("side", String(16), nullable=False),  # good, bad, undecided, skip
    Column("verdict", String(32)),  # the A/B verdict; null: skipped (the probe did not run)
    Column("ratio", Float),
    Column("ratio_low", Float),
    Column("ratio_high", Float),
    Column("pairs", Integer),
    Column("seconds", Float),
    Column("skipped", Text),  # why the candidate could not be probed
    Column("details", JSON),
    UniqueConstraint("bisection_id", "number", name="uq_bisection_probes_bisection_number"),
)

VERSION_TABLE = "alembic_version"  # Alembic's: the revision a database's schema is at
# the tables every revision of the schema has had (migration 0001 on): a migration that drops one changes this
ALWAYS_THERE = frozenset({"hosts", "sessions", "figures"})
_LISTED = 5  # tables a message names before "and N more"


def owned_by_hwregress(tables: Collection[str], revisions: Collection[str]) -> bool:
    """Whether a database holding ``tables`` (its tables and views), its :data:`VERSION_TABLE` holding ``revisions``,
    may be written as the store: it holds no table (empty: the first open creates the schema), or it holds
    :data:`ALWAYS_THERE` and a revision (hwregress's, of any version: a revision this one does not know is then
    refused by Alembic, by name). Anything else is another application's database, which hwregress never writes; a
    revision alone is no proof (``0001`` is a common one)."""
    if not tables:
        return True
    return VERSION_TABLE in tables and bool(revisions) and ALWAYS_THERE <= set(tables)


def described_tables(tables: Collection[str]) -> str:
    """``tables: a, b, c`` for a message, the first :data:`_LISTED` and how many more."""
    names = sorted(tables)
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return f"tables: {', '.join(names[:_LISTED])}{more}"
