"""History operations: the session version behind the strong ETag, the effective segments of a
reverted session, the segments a fork inherited, and the revert history.

Revision ID: 0004_history_a
Revises: 0006_rollout
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_history_a"
down_revision = "0006_rollout"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("version", sa.Integer, nullable=False, server_default="0"))
    op.add_column("sessions", sa.Column("revision", sa.Integer, nullable=False, server_default="0"))
    op.add_column("sessions", sa.Column("own_segments", sa.Text))
    op.add_column("session_lineage", sa.Column("cutoff_segments", sa.Text))
    op.create_table(
        "session_reverts",
        sa.Column("session_id", sa.String(256), sa.ForeignKey("sessions.session_id"), primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True),
        sa.Column("before_turn_id", sa.String(256), nullable=False),
        sa.Column("principal", sa.String(256), nullable=False),
        sa.Column("segments_before", sa.Text, nullable=False),
        sa.Column("segments_after", sa.Text, nullable=False),
        sa.Column("reverted_turn_count", sa.Integer, nullable=False),
        sa.Column("reverted_record_count", sa.Integer, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_reverts")
    op.drop_column("session_lineage", "cutoff_segments")
    op.drop_column("sessions", "own_segments")
    op.drop_column("sessions", "revision")
    op.drop_column("sessions", "version")
