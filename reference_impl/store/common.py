"""What every chapter's statements share: the connections of one transaction and row mappers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy import Integer, Table, and_, bindparam, func, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import BindParameter

from reference_impl.principals import KEY_SEPARATOR
from reference_impl.store import ids
from reference_impl.store import tables as t
from reference_impl.store.rows import LineageRow, SessionRow, TurnRow

# A session with its lineage summary: the columns every read of one session selects.
SESSION_COLUMNS: list[Any] = [
    t.sessions,
    t.session_lineage.c.parent_session_id.label("l_parent_session_id"),
    t.session_lineage.c.root_session_id.label("l_root_session_id"),
    t.session_lineage.c.depth.label("l_depth"),
    t.session_lineage.c.inherited_turn_count.label("l_inherited_turn_count"),
    t.session_lineage.c.cut_mode.label("l_cut_mode"),
    t.session_lineage.c.cut_turn_id.label("l_cut_turn_id"),
    t.session_lineage.c.cutoff_session_id.label("l_cutoff_session_id"),
    t.session_lineage.c.cutoff_turn_index.label("l_cutoff_turn_index"),
    t.session_lineage.c.cutoff_record_index.label("l_cutoff_record_index"),
    t.session_lineage.c.created_at.label("l_created_at"),
    t.session_lineage.c.cutoff_segments.label("l_cutoff_segments"),
]

SESSIONS_WITH_LINEAGE = t.sessions.outerjoin(
    t.session_lineage, t.session_lineage.c.session_id == t.sessions.c.session_id
)

# The viewer's grant on a session, joined into the same statement that reads the session.
GRANT_ROLE = t.session_grants.c.role.label("g_role")


def sessions_seen_by(viewer: Any) -> Any:
    """Sessions with their lineage and the grant the viewer holds on each (none without a viewer).
    `viewer`: a principal, None, or a bound parameter (a statement built once)."""
    grants = t.session_grants
    principal = viewer if isinstance(viewer, BindParameter) else (viewer or "")
    on = and_(grants.c.session_id == t.sessions.c.session_id, grants.c.principal == principal)
    return SESSIONS_WITH_LINEAGE.outerjoin(grants, on)


def session_from(row: Mapping[str, Any], viewer: str | None = None) -> SessionRow:
    lineage = None
    if row["l_parent_session_id"] is not None:
        lineage = LineageRow(
            session_id=row["session_id"],
            parent_session_id=row["l_parent_session_id"],
            root_session_id=row["l_root_session_id"],
            depth=row["l_depth"],
            inherited_turn_count=row["l_inherited_turn_count"],
            cut_mode=row["l_cut_mode"],
            cut_turn_id=row["l_cut_turn_id"],
            cutoff_session_id=row["l_cutoff_session_id"],
            cutoff_turn_index=row["l_cutoff_turn_index"],
            cutoff_record_index=row["l_cutoff_record_index"],
            created_at=row["l_created_at"],
            cutoff_segments=row.get("l_cutoff_segments"),
        )
    return SessionRow(
        session_id=row["session_id"],
        owner=row["owner"],
        name=row["name"],
        description=row["description"],
        created_at=row["created_at"],
        depth=row["depth"],
        turn_count=row["turn_count"],
        record_count=row["record_count"],
        running_turn_id=row["running_turn_id"],
        lineage=lineage,
        deleted_at=row.get("deleted_at"),
        child_count=row.get("child_count") or 0,
        viewer=viewer,
        viewer_grant=row.get("g_role") if viewer is not None else None,
        version=row.get("version") or 0,
        revision=row.get("revision") or 0,
        own_segments=row.get("own_segments"),
        suspended_turn_id=row.get("suspended_turn_id"),
    )


def turn_from(row: Any) -> TurnRow:
    """A turn from a row with its session id and token (`TURN_SELECT`): a NULL id is derived."""
    fields = {key: row[key] for key in TurnRow.__dataclass_fields__}
    if fields["turn_id"] is None:
        fields["turn_id"] = ids.turn_key(fields["session_id"], fields["token"], fields["turn_index"])
    return TurnRow(**fields)


def turn_where(turn_key: str) -> Any:
    """The turn with this key: a derived id names its session's token and its index (and its column
    is NULL); any other id is stored. A derived-looking id may be stored too (a client's, whose token
    is no session's), so both are asked for; no id names two turns (ids.py). `turn_match` gives the
    same clause with its values apart, for statements built once."""
    match, values = turn_match(turn_key)
    return match.params(values)


def turn_match(turn_key: str) -> tuple[Any, dict[str, Any]]:
    """`turn_where(turn_key)` as a clause of one of three shapes, each built once, and the values
    it binds (`tw_*`): a statement naming a turn by key is then compiled and cache-keyed once per
    shape, not built anew on every call (that building was about a twentieth of the server's time
    on the interpreter lock in a conformance run)."""
    found = ids.decoded(turn_key)
    if found is None:
        return _turn_match_clause(None), {"tw_key": turn_key}
    token, index = found
    scope = ids.key_scope(turn_key)
    values = {"tw_key": turn_key, "tw_token": token, "tw_index": index, "tw_scope": scope, "tw_scope_len": len(scope)}
    return _turn_match_clause(bool(scope)), values


@lru_cache(maxsize=3)
def _turn_match_clause(project: bool | None) -> Any:
    stored = t.turns.c.turn_id == bindparam("tw_key")
    if project is None:
        return stored
    sessions = t.sessions.c
    scoped = (
        func.substr(sessions.session_id, 1, bindparam("tw_scope_len", type_=Integer)) == bindparam("tw_scope")
        if project
        else ~sessions.session_id.contains(KEY_SEPARATOR, autoescape=True)
    )
    own = select(sessions.sid).where(sessions.token == bindparam("tw_token"), scoped).scalar_subquery()
    derived = and_(t.turns.c.sid == own, t.turns.c.turn_index == bindparam("tw_index", type_=Integer), t.turns.c.turn_id.is_(None))
    return or_(derived, stored)


def in_scope(scope: str) -> Any:
    """Sessions of the project whose keys start with `scope` ('' for the default project, whose keys
    hold no separator; 'P~' for project P, whose name holds none)."""
    if not scope:
        return ~t.sessions.c.session_id.contains(KEY_SEPARATOR, autoescape=True)
    return func.substr(t.sessions.c.session_id, 1, len(scope)) == scope


def sid_of(session_id: Any, keys: Table = t.sessions) -> Any:
    """The integer key of a session id, as a scalar subquery: turns and records are keyed by it
    (tables.py). `keys`: the sessions table, or a records store's own `record_sessions`."""
    return select(keys.c.sid).where(keys.c.session_id == session_id).scalar_subquery()


def sid_sql(param: str, keys: str = "sessions") -> str:
    """`sid_of` in SQL text, for the statements written as text: the key of the id bound to `param`."""
    return f"(SELECT sid FROM {keys} WHERE session_id = :{param})"


# A turn with its session's id: turns hold the session's integer key only.
TURNS_WITH_SESSION = t.turns.join(t.sessions, t.sessions.c.sid == t.turns.c.sid)
TURN_SELECT: list[Any] = [
    *(column for column in t.turns.c if column.name != "sid"), t.sessions.c.session_id, t.sessions.c.token,
]


class Statements:
    """The connections of one transaction; each chapter's statements are a subclass of this.

    Record statements go to `records_conn`: the same connection with one store, a connection to
    the records store (opened on first use, in its own transaction) with two. Statements whose rows
    are fetched as they are consumed go to `stream_conn`: the same connection, unless it reads in
    autocommit (a PostgreSQL read), where a server-side cursor cannot live: then a second
    connection of the same store in a transaction, opened on first use.
    """

    def __init__(
        self, conn: Connection, records_conn: Callable[[], Connection] | Connection | None = None, records_apart: bool = False,
        *, stream_conn: Callable[[], Connection] | None = None,
    ) -> None:
        self.conn = conn
        self._records_conn = records_conn
        self.records_apart = records_apart  # records_conn is a records store apart (two stores)
        self._stream_opener = stream_conn
        self._stream_conn: Connection | None = None
        # The token of each session whose chain this transaction read (`chain`): the ids the server
        # made for the session derive from it (store/ids.py). A session's token never changes.
        self.tokens: dict[str, str] = {}

    @property
    def stream_conn(self) -> Connection:
        if self._stream_opener is None:
            return self.conn
        if self._stream_conn is None:
            self._stream_conn = self._stream_opener()
        return self._stream_conn

    @property
    def record_keys(self) -> Table:
        """Where record statements find a session's integer key: the sessions table, or the
        records store's own `record_sessions` when the records are kept apart."""
        return t.record_sessions if self.records_apart else t.sessions

    @property
    def records_conn(self) -> Connection:
        if self._records_conn is None:
            return self.conn
        if callable(self._records_conn) and not isinstance(self._records_conn, Connection):
            self._records_conn = self._records_conn()
        return self._records_conn
