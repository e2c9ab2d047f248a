"""Writer leases: at most one writer per session, with an owner token and an expiry.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_leases",
        sa.Column("session_id", sa.String(128), sa.ForeignKey("sessions.session_id"), primary_key=True),
        sa.Column("lease_id", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(256), nullable=False),
        sa.Column("expires_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_leases")
