"""The first schema: hosts, sessions, figures (as :mod:`hwregress.store.tables` declares them in hwregress 0.6).

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("host_id", sa.String(512), nullable=False),
        sa.Column("aliases", sa.JSON(), nullable=False),
        sa.Column("hardware_key", sa.String(200)),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("host_id", name="pk_hosts"),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(300), nullable=False),
        sa.Column("host_id", sa.String(512), nullable=False),
        sa.Column("hostname", sa.String(300)),
        sa.Column("hardware_key", sa.String(200)),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("exitstatus", sa.Integer()),
        sa.Column("interrupted", sa.Boolean(), nullable=False),
        sa.Column("git_sha", sa.String(64)),
        sa.Column("git_branch", sa.String(300)),
        sa.Column("ci_build_url", sa.Text()),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("pushed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sessions"),
        sa.UniqueConstraint("name", name="uq_sessions_name"),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.host_id"], name="fk_sessions_host_id_hosts"),
    )
    op.create_index("ix_sessions_hardware_key", "sessions", ["hardware_key", "started_at"])
    op.create_index("ix_sessions_host_id", "sessions", ["host_id", "started_at"])
    op.create_table(
        "figures",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("session_id", sa.String(36), nullable=False),
        sa.Column("test_id", sa.Text(), nullable=False),
        sa.Column("hardware_key", sa.String(200)),
        sa.Column("device_name", sa.String(300)),
        sa.Column("family", sa.String(64)),
        sa.Column("model", sa.String(200)),
        sa.Column("mode", sa.String(64)),
        sa.Column("batch_size", sa.Integer()),
        sa.Column("dtype", sa.String(32)),
        sa.Column("device", sa.String(64)),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("unit", sa.String(64)),
        sa.Column("direction", sa.String(8), nullable=False),
        sa.Column("samples", sa.JSON()),
        sa.Column("median", sa.Float()),
        sa.Column("q1", sa.Float()),
        sa.Column("q3", sa.Float()),
        sa.Column("n", sa.Integer()),
        sa.Column("verdict", sa.String(32)),
        sa.Column("ratio", sa.Float()),
        sa.Column("threshold", sa.Float()),
        sa.Column("mds", sa.Float()),
        sa.Column("p_value", sa.Float()),
        sa.Column("baseline_median", sa.Float()),
        sa.Column("baseline_recorded_at", sa.String(64)),
        sa.Column("identity", sa.JSON()),
        sa.Column("diagnosis", sa.JSON()),
        sa.PrimaryKeyConstraint("id", name="pk_figures"),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name="fk_figures_session_id_sessions",
                                ondelete="CASCADE"),
        sa.UniqueConstraint("session_id", "test_id", "metric", name="uq_figures_session_test_metric"),
    )
    op.create_index("ix_figures_hardware_key", "figures", ["hardware_key", "test_id"])


def downgrade() -> None:
    op.drop_table("figures")
    op.drop_table("sessions")
    op.drop_table("hosts")
