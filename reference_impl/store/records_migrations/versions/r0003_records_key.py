"""Records keyed by (session_id, record_index); no index on record_id (reference_impl/store/records_key.py).

Revision ID: r0003
Revises: r0002
"""

from reference_impl.store.records_key import key_records_by_position

revision = "r0003"
down_revision = "r0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    key_records_by_position(foreign_key=False)


def downgrade() -> None:
    pass
