"""Rollout: the pending rewind action of a child created by a rewind.

Revision ID: 0006_rollout
Revises: 0005_history_b
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_rollout"
down_revision = "0005_history_b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_actions",
        sa.Column("session_id", sa.String(256), primary_key=True),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("draft", sa.Text),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pending_actions")
