"""Suspend and recover: the session's suspended turn and the input queue of turns.

Revision ID: 0005_history_b
Revises: 0003_authz
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_history_b"
down_revision = "0003_authz"
branch_labels = None
depends_on = None

WIDE_ID = sa.String(256)


def upgrade() -> None:
    # The turn holding the session's slot while suspended or interrupted (running_turn_id is then
    # NULL): no turn starts while either is set.
    op.add_column("sessions", sa.Column("suspended_turn_id", WIDE_ID))
    op.create_table(
        "turn_inputs",
        sa.Column("input_id", sa.String(64), primary_key=True),
        sa.Column("session_id", WIDE_ID, sa.ForeignKey("sessions.session_id"), nullable=False),
        sa.Column("turn_id", WIDE_ID, nullable=False),
        sa.Column("input_index", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("queued_at", sa.String(40), nullable=False),
        sa.Column("record_id", sa.String(64)),
        sa.Column("settled_at", sa.String(40)),
    )
    op.create_index("uq_turn_inputs_turn_index", "turn_inputs", ["turn_id", "input_index"], unique=True)
    op.create_index("ix_turn_inputs_session", "turn_inputs", ["session_id"])
    # Imports of legacy histories (capability legacy-import): one row per (principal, legacy id).
    op.create_table(
        "legacy_imports",
        sa.Column("principal", sa.String(256), primary_key=True),
        sa.Column("legacy_id", sa.String(256), primary_key=True),
        sa.Column("session_id", WIDE_ID),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("fingerprint", sa.String(96)),
        sa.Column("bytes_done", sa.Integer, nullable=False),
        sa.Column("lines_done", sa.Integer, nullable=False),
        sa.Column("claimed_until", sa.String(40)),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("legacy_imports")
    op.drop_index("ix_turn_inputs_session", "turn_inputs")
    op.drop_index("uq_turn_inputs_turn_index", "turn_inputs")
    op.drop_table("turn_inputs")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("suspended_turn_id")
