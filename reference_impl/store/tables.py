"""Table definitions used by the store's queries; the Alembic migrations create the same schema."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, ForeignKey, Identity, Index, Integer, LargeBinary, MetaData, String, Table, Text, text

# A session or turn id as stored: up to 128 characters, prefixed by its project (principals.py).
ID = String(256)
# The integer a session's turns and records are keyed by in place of its id (`sid`): a text id of
# up to 256 characters in every turn and record row and index entry was most of what a record cost
# beyond its content (benchmarks, comparison 4). Never reused while any row refers to it.
SID = BigInteger().with_variant(Integer(), "sqlite")
metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("session_id", ID, primary_key=True),
    Column("owner", String(256), nullable=False),
    Column("name", String(1024)),
    Column("description", String(1024)),
    Column("created_at", String(40), nullable=False),
    Column("depth", Integer, nullable=False),
    Column("turn_count", Integer, nullable=False),
    Column("record_count", Integer, nullable=False),
    Column("running_turn_id", ID),
    # Soft deletion (DEL-SOFT-001): set once, never cleared.
    Column("deleted_at", String(40)),
    # Children not purged yet; a fork counts itself in under the row lock, a purge needs 0.
    Column("child_count", Integer, nullable=False, server_default="0"),
    # Bumped by every change to the transcript or the metadata: the strong ETag (history.py).
    Column("version", Integer, nullable=False, server_default="0"),
    # Reverts so far, and the session's own effective segments since the last one (JSON; NULL:
    # never reverted, every own record is effective).
    Column("revision", Integer, nullable=False, server_default="0"),
    Column("own_segments", Text),
    # The turn holding the slot while suspended or interrupted (running_turn_id is then NULL).
    Column("suspended_turn_id", ID),
    # The session's integer key (SID): PostgreSQL draws it from a sequence; on SQLite, where writes
    # are serialised, the insert takes the largest plus one (store/sessions.py).
    Column("sid", SID, Identity(), nullable=False, unique=True),
    # 32 random hex digits, made with the session: the turn and record ids the server makes for
    # the session are derived from it and the index (ids.py), never stored.
    Column("token", String(32), nullable=False, unique=True),
    Index("ix_sessions_owner", "owner", "session_id"),
)

session_lineage = Table(
    "session_lineage",
    metadata,
    Column("session_id", ID, ForeignKey("sessions.session_id"), primary_key=True),
    Column("parent_session_id", ID, ForeignKey("sessions.session_id"), nullable=False),
    Column("root_session_id", ID, nullable=False),
    Column("depth", Integer, nullable=False),
    Column("inherited_turn_count", Integer, nullable=False),
    Column("cut_mode", String(16), nullable=False),
    Column("cut_turn_id", ID),
    # The physical cutoff: the session that holds the last inherited turn, that turn's index and
    # the index of its last record. NULL session: nothing is inherited.
    Column("cutoff_session_id", ID),
    Column("cutoff_turn_index", Integer, nullable=False),
    Column("cutoff_record_index", Integer, nullable=False),
    Column("created_at", String(40), nullable=False),
    # The cutoff session's effective segments when the fork was taken (JSON; NULL: all of them).
    Column("cutoff_segments", Text),
    Index("ix_session_lineage_parent", "parent_session_id"),
    Index("ix_session_lineage_root", "root_session_id"),
)

# Keyed by (sid, turn_index): a session's turns in order; on SQLite the rows live in the key's
# b-tree. A turn's session id is its session row's (joined by sid). `turn_id` is NULL for an id the
# server derived (ids.py); it holds a client's id, or one made before derived ids.
turns = Table(
    "turns",
    metadata,
    Column("sid", SID, ForeignKey("sessions.sid"), primary_key=True, autoincrement=False),
    Column("turn_index", Integer, primary_key=True, autoincrement=False),
    Column("turn_id", ID),
    Column("role", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("first_record_index", Integer, nullable=False),
    Column("end_record_index", Integer),
    Column("created_at", String(40), nullable=False),
    Column("finished_at", String(40)),
    Index(
        "uq_turns_turn_id", "turn_id", unique=True,
        sqlite_where=text("turn_id IS NOT NULL"), postgresql_where=text("turn_id IS NOT NULL"),
    ),
    sqlite_with_rowid=False,
)

# Keyed by (sid, record_index), the order every read takes; on SQLite the rows live in the key's
# b-tree (records_key.py). `record_id` and `turn_id` are NULL for ids the server derives (ids.py);
# no statement looks a record up by its id. With one store, sid is the session row's; a records
# store apart keeps its own (record_sessions).
records = Table(
    "records",
    metadata,
    Column("sid", SID, primary_key=True, autoincrement=False),
    Column("record_index", Integer, primary_key=True, autoincrement=False),
    Column("record_id", String(64)),
    Column("turn_id", ID),
    Column("turn_index", Integer, nullable=False),
    Column("record_type", String(64), nullable=False),
    Column("content", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
    sqlite_with_rowid=False,
)

# A records store apart from the core store (two-store deployment) only: the integer key its
# records use for each session id, made by the first record write of the session.
record_sessions = Table(
    "record_sessions",
    metadata,
    Column("session_id", ID, primary_key=True),
    Column("sid", SID, Identity(), nullable=False, unique=True),
    Column("token", String(32)),  # the session's (sessions.token); NULL: only ids made before derived ids
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("principal", String(256), primary_key=True),
    Column("idempotency_key", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("child_session_id", ID, nullable=False),
    Column("response_status", Integer, nullable=False),
    Column("response_body", Text, nullable=False),
    Column("expires_at", String(40), nullable=False),
)

session_leases = Table(
    "session_leases",
    metadata,
    Column("session_id", ID, ForeignKey("sessions.session_id"), primary_key=True),
    Column("lease_id", String(64), nullable=False),
    Column("principal", String(256), nullable=False),
    Column("expires_at", String(40), nullable=False),
)

session_grants = Table(
    "session_grants",
    metadata,
    Column("session_id", ID, ForeignKey("sessions.session_id"), primary_key=True),
    Column("principal", String(256), primary_key=True),
    Column("role", String(16), nullable=False),
    Column("granted_at", String(40), nullable=False),
    Index("ix_session_grants_principal", "principal", "session_id"),
)

# Attachments live in the core store. `position` is the session's record count when it was
# stored: a descendant reaches it when it inherits a record of the session at or after it.
attachments = Table(
    "attachments",
    metadata,
    Column("session_id", ID, ForeignKey("sessions.session_id"), primary_key=True),
    Column("attachment_id", String(128), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("media_type", String(255), nullable=False),
    Column("size", Integer, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("content", LargeBinary, nullable=False),
    Column("created_at", String(40), nullable=False),
)

# One row per revert: the session's own effective segments before and after it (history.py).
session_reverts = Table(
    "session_reverts",
    metadata,
    Column("session_id", ID, ForeignKey("sessions.session_id"), primary_key=True),
    Column("revision", Integer, primary_key=True),
    Column("before_turn_id", ID, nullable=False),
    Column("principal", String(256), nullable=False),
    Column("segments_before", Text, nullable=False),
    Column("segments_after", Text, nullable=False),
    Column("reverted_turn_count", Integer, nullable=False),
    Column("reverted_record_count", Integer, nullable=False),
    Column("created_at", String(40), nullable=False),
)

# The pending rewind action of a child created by a rewind (capability `rewind`). Its state is
# not stored: it is `in-flight` exactly while the session's `running_turn_id` is set.
pending_actions = Table(
    "pending_actions",
    metadata,
    Column("session_id", ID, primary_key=True),  # no foreign key: a purge deletes it explicitly
    Column("mode", String(16), nullable=False),
    Column("draft", Text),
    Column("created_at", String(40), nullable=False),
)

# The input queue of a turn (capability `suspend`): inputs wait `pending` until delivered (appended
# as records of type `input`) or dropped (by a suspension or an interruption).
turn_inputs = Table(
    "turn_inputs",
    metadata,
    Column("input_id", String(64), primary_key=True),
    Column("session_id", ID, ForeignKey("sessions.session_id"), nullable=False),
    Column("turn_id", ID, nullable=False),
    Column("input_index", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("queued_at", String(40), nullable=False),
    Column("record_id", String(64)),
    Column("settled_at", String(40)),
    Index("uq_turn_inputs_turn_index", "turn_id", "input_index", unique=True),
    Index("ix_turn_inputs_session", "session_id"),
)

# Legacy imports (capability `legacy-import`): one row per (principal, legacy session id). The
# row is claimed while an upload works on it; `bytes_done`/`lines_done` say where a re-upload
# continues; `state` holds the progress details (JSON).
legacy_imports = Table(
    "legacy_imports",
    metadata,
    Column("principal", String(256), primary_key=True),
    Column("legacy_id", String(256), primary_key=True),
    Column("session_id", ID),
    Column("status", String(16), nullable=False),
    Column("fingerprint", String(96)),
    Column("bytes_done", Integer, nullable=False),
    Column("lines_done", Integer, nullable=False),
    Column("claimed_until", String(40)),
    Column("state", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("updated_at", String(40), nullable=False),
)
