"""Turns and records keyed by the session's integer key `sessions.sid` in place of its text id, and
the sessions' tokens the server's turn and record ids derive from (reference_impl/store/session_keys.py,
ids.py): existing ids stay stored, new ones are not.

Revision ID: 0008_session_keys
Revises: 0007_records_key
"""

from reference_impl.store.session_keys import key_records, key_sessions, key_turns

revision = "0008_session_keys"
down_revision = "0007_records_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    key_sessions()
    key_turns()
    key_records(sessions="sessions")


def downgrade() -> None:
    pass
