"""Sharing, attachments and deletion: grants, attachments, soft deletion and child counts; ids
wide enough to carry their project.

Revision ID: 0003_authz
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_authz"
down_revision = "0002"
branch_labels = None
depends_on = None

WIDE_ID = sa.String(256)
# Columns holding a session or turn id, which now carry the project (reference_impl/principals.py).
ID_COLUMNS = {
    "sessions": ["session_id", "running_turn_id"],
    "session_lineage": ["session_id", "parent_session_id", "root_session_id", "cut_turn_id", "cutoff_session_id"],
    "turns": ["turn_id", "session_id"],
    "records": ["session_id", "turn_id"],
    "idempotency_keys": ["child_session_id"],
    "session_leases": ["session_id"],
}


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":  # SQLite does not enforce lengths
        for table, columns in ID_COLUMNS.items():
            for column in columns:
                op.alter_column(table, column, type_=WIDE_ID, existing_type=sa.String(128))
    op.add_column("sessions", sa.Column("deleted_at", sa.String(40)))
    op.add_column("sessions", sa.Column("child_count", sa.Integer, nullable=False, server_default="0"))
    op.execute(
        "UPDATE sessions SET child_count = "
        "(SELECT count(*) FROM session_lineage l WHERE l.parent_session_id = sessions.session_id)"
    )
    op.create_index("ix_sessions_owner", "sessions", ["owner", "session_id"])
    op.create_table(
        "session_grants",
        sa.Column("session_id", WIDE_ID, sa.ForeignKey("sessions.session_id"), primary_key=True),
        sa.Column("principal", sa.String(256), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("granted_at", sa.String(40), nullable=False),
    )
    op.create_index("ix_session_grants_principal", "session_grants", ["principal", "session_id"])
    op.create_table(
        "attachments",
        sa.Column("session_id", WIDE_ID, sa.ForeignKey("sessions.session_id"), primary_key=True),
        sa.Column("attachment_id", sa.String(128), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("media_type", sa.String(255), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("content", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("attachments")
    op.drop_index("ix_session_grants_principal", "session_grants")
    op.drop_table("session_grants")
    op.drop_index("ix_sessions_owner", "sessions")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("child_count")
        batch.drop_column("deleted_at")
