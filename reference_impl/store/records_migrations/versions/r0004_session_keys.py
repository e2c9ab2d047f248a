"""Records keyed by an integer session key kept in `record_sessions` in place of the session's text
id, with the session's token once a write brings it (reference_impl/store/session_keys.py, ids.py):
existing record ids stay stored, new ones derived are not.

Revision ID: r0004
Revises: r0003
"""

from reference_impl.store.session_keys import key_records, make_record_sessions

revision = "r0004"
down_revision = "r0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    make_record_sessions()
    key_records(sessions="record_sessions")


def downgrade() -> None:
    pass
