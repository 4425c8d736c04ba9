"""Bisections: one row per ``python -m hwregress bisect`` and one per probe of it, as :mod:`hwregress.store.tables`
declares them; each constraint and index named as the naming convention of ``tables.metadata`` names it.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bisections",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("hostname", sa.String(300)),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(64), nullable=False),
        sa.Column("exit_code", sa.Integer()),
        sa.Column("culprit", sa.Text()),
        sa.Column("last_good", sa.Text()),
        sa.Column("first_bad", sa.Text()),
        sa.Column("seconds", sa.Float()),
        sa.Column("document", sa.JSON()),
        sa.PrimaryKeyConstraint("id", name="pk_bisections"),
    )
    op.create_index("ix_bisections_started_at", "bisections", ["started_at"])
    op.create_table(
        "bisection_probes",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("bisection_id", sa.String(36), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("candidate", sa.Text(), nullable=False),
        sa.Column("reference", sa.Text(), nullable=False),
        sa.Column("side", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(32)),
        sa.Column("ratio", sa.Float()),
        sa.Column("ratio_low", sa.Float()),
        sa.Column("ratio_high", sa.Float()),
        sa.Column("pairs", sa.Integer()),
        sa.Column("seconds", sa.Float()),
        sa.Column("skipped", sa.Text()),
        sa.Column("details", sa.JSON()),
        sa.PrimaryKeyConstraint("id", name="pk_bisection_probes"),
        sa.ForeignKeyConstraint(["bisection_id"], ["bisections.id"], name="fk_bisection_probes_bisection_id_bisections",
                                ondelete="CASCADE"),
        sa.UniqueConstraint("bisection_id", "number", name="uq_bisection_probes_bisection_number"),
    )


def downgrade() -> None:
    op.drop_table("bisection_probes")
    op.drop_index("ix_bisections_started_at", table_name="bisections")
    op.drop_table("bisections")
