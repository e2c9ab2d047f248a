"""The records table, alone, for a deployment that keeps records in their own store.

Revision ID: r0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "r0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "records",
        sa.Column("record_id", sa.String(64), primary_key=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("record_index", sa.Integer, nullable=False),
        sa.Column("turn_id", sa.String(128), nullable=False),
        sa.Column("turn_index", sa.Integer, nullable=False),
        sa.Column("record_type", sa.String(64), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_index("uq_records_session_index", "records", ["session_id", "record_index"], unique=True)


def downgrade() -> None:
    op.drop_table("records")
