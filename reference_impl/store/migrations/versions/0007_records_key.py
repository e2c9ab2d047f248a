"""Records keyed by (session_id, record_index); no index on record_id (reference_impl/store/records_key.py).

Revision ID: 0007_records_key
Revises: 0004_history_a
"""

from reference_impl.store.records_key import key_records_by_position

revision = "0007_records_key"
down_revision = "0004_history_a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    key_records_by_position(foreign_key=True)


def downgrade() -> None:
    pass
