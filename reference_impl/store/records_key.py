"""The records table keyed by (session_id, record_index): one migration step for both stores.

A record is always found by its session and index, never by `record_id` alone (a server-made
uuid, selected but never looked up), so the key that orders a transcript is the primary key and
no index on `record_id` is kept. On SQLite the table is WITHOUT ROWID: the rows live in the key's
b-tree, so neither a rowid table beside the key nor a second index is stored. This is most of
the storage a record costs beyond its content (benchmarks, comparison 4).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

COLUMNS = ("record_id", "session_id", "record_index", "turn_id", "turn_index", "record_type", "content", "created_at")


def key_records_by_position(foreign_key: bool) -> None:
    """Make (session_id, record_index) the records' primary key, the rows kept as they are;
    `foreign_key`: session_id references sessions (the core store; a records store has none)."""
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("records_pkey", "records", type_="primary")
        op.drop_index("uq_records_session_index", table_name="records")
        op.create_primary_key("records_pkey", "records", ["session_id", "record_index"])
        return
    session = [sa.ForeignKey("sessions.session_id")] if foreign_key else []
    op.create_table(
        "records_keyed",
        sa.Column("record_id", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(256), *session, primary_key=True),
        sa.Column("record_index", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("turn_id", sa.String(256), nullable=False),
        sa.Column("turn_index", sa.Integer, nullable=False),
        sa.Column("record_type", sa.String(64), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sqlite_with_rowid=False,
    )
    columns = ", ".join(COLUMNS)
    op.execute(f"INSERT INTO records_keyed ({columns}) SELECT {columns} FROM records")
    op.drop_table("records")
    op.rename_table("records_keyed", "records")
