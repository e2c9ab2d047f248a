"""Sessions, lineage, turns, records and idempotency keys.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.String(128)


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("session_id", ID, primary_key=True),
        sa.Column("owner", sa.String(256), nullable=False),
        sa.Column("name", sa.String(1024)),
        sa.Column("description", sa.String(1024)),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("turn_count", sa.Integer, nullable=False),
        sa.Column("record_count", sa.Integer, nullable=False),
        sa.Column("running_turn_id", ID),
    )
    op.create_table(
        "session_lineage",
        sa.Column("session_id", ID, sa.ForeignKey("sessions.session_id"), primary_key=True),
        sa.Column("parent_session_id", ID, sa.ForeignKey("sessions.session_id"), nullable=False),
        sa.Column("root_session_id", ID, nullable=False),
        sa.Column("depth", sa.Integer, nullable=False),
        sa.Column("inherited_turn_count", sa.Integer, nullable=False),
        sa.Column("cut_mode", sa.String(16), nullable=False),
        sa.Column("cut_turn_id", ID),
        sa.Column("cutoff_session_id", ID),
        sa.Column("cutoff_turn_index", sa.Integer, nullable=False),
        sa.Column("cutoff_record_index", sa.Integer, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_index("ix_session_lineage_parent", "session_lineage", ["parent_session_id"])
    op.create_index("ix_session_lineage_root", "session_lineage", ["root_session_id"])
    op.create_table(
        "turns",
        sa.Column("turn_id", ID, primary_key=True),
        sa.Column("session_id", ID, sa.ForeignKey("sessions.session_id"), nullable=False),
        sa.Column("turn_index", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("first_record_index", sa.Integer, nullable=False),
        sa.Column("end_record_index", sa.Integer),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("finished_at", sa.String(40)),
    )
    op.create_index("uq_turns_session_index", "turns", ["session_id", "turn_index"], unique=True)
    op.create_table(
        "records",
        sa.Column("record_id", sa.String(64), primary_key=True),
        sa.Column("session_id", ID, sa.ForeignKey("sessions.session_id"), nullable=False),
        sa.Column("record_index", sa.Integer, nullable=False),
        sa.Column("turn_id", ID, nullable=False),
        sa.Column("turn_index", sa.Integer, nullable=False),
        sa.Column("record_type", sa.String(64), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
    )
    op.create_index(
        "uq_records_session_index", "records", ["session_id", "record_index"], unique=True
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("principal", sa.String(256), primary_key=True),
        sa.Column("idempotency_key", sa.String(255), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("child_session_id", ID, nullable=False),
        sa.Column("response_status", sa.Integer, nullable=False),
        sa.Column("response_body", sa.Text, nullable=False),
        sa.Column("expires_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    op.drop_table("records")
    op.drop_table("turns")
    op.drop_table("session_lineage")
    op.drop_table("sessions")
