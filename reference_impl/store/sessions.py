"""Statements of the sessions chapter: sessions, turns, record index reservations and records."""

from __future__ import annotations

import secrets
from functools import lru_cache
from typing import Any, NamedTuple

from sqlalchemy import String, and_, bindparam, cast, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import Select

from reference_impl.store import ids
from reference_impl.store import tables as t
from reference_impl.store.common import (
    GRANT_ROLE,
    SESSION_COLUMNS,
    TURN_SELECT,
    TURNS_WITH_SESSION,
    Statements,
    session_from,
    sessions_seen_by,
    sid_of,
    in_scope,
    turn_from,
    turn_match,
)
from reference_impl.store.rows import LeaseRow, SessionRow, TurnRow


# The statements every request sends, built once with parameters (`:session_id`, `:viewer`):
# SQLAlchemy then neither rebuilds them nor recomputes their cache key on every call.
_SESSION_ID = bindparam("session_id")


@lru_cache(maxsize=1)
def _session_query() -> Select[Any]:
    return (
        select(*SESSION_COLUMNS, GRANT_ROLE)
        .select_from(sessions_seen_by(bindparam("viewer")))
        .where(t.sessions.c.session_id == _SESSION_ID)
    )


@lru_cache(maxsize=2)
def _session_for_write_query(lock: bool) -> Select[Any]:
    leases = t.session_leases
    query = (
        select(
            *SESSION_COLUMNS,
            GRANT_ROLE,
            leases.c.lease_id.label("w_lease_id"),
            leases.c.principal.label("w_principal"),
            leases.c.expires_at.label("w_expires_at"),
        )
        .select_from(sessions_seen_by(bindparam("viewer")).outerjoin(leases, leases.c.session_id == t.sessions.c.session_id))
        .where(t.sessions.c.session_id == _SESSION_ID)
    )
    return query.with_for_update(of=t.sessions) if lock else query




@lru_cache(maxsize=1)
def _claim_turn_slot_query() -> Any:
    sessions = t.sessions
    return (
        update(sessions)
        .where(
            sessions.c.session_id == bindparam("p_session_id"),
            sessions.c.running_turn_id.is_(None),
            sessions.c.suspended_turn_id.is_(None),  # a suspended or interrupted turn holds the slot too
        )
        .values(running_turn_id=new_turn_key(), turn_count=sessions.c.turn_count + 1, version=sessions.c.version + 1)
        .returning(sessions.c.turn_count, sessions.c.record_count, sessions.c.running_turn_id, sessions.c.token)
    )


@lru_cache(maxsize=1)
def _release_slot_query() -> Any:
    sessions = t.sessions
    return (
        update(sessions)
        .where(sessions.c.running_turn_id == bindparam("p_turn_id"))
        .values(running_turn_id=None, version=sessions.c.version + 1)
        .returning(sessions.c.record_count)
    )


@lru_cache(maxsize=3)
def _close_turn_query(match: Any) -> Any:
    return (
        update(t.turns)
        .where(match)
        .values(status=bindparam("p_status"), finished_at=bindparam("p_finished_at"), end_record_index=bindparam("p_end"))
    )


@lru_cache(maxsize=1)
def _last_finished_turn_query() -> Any:
    """A session's last finished turn: built once, as a fork at `latest` asks for it every time."""
    return (
        select(*TURN_SELECT)
        .select_from(TURNS_WITH_SESSION)
        .where(t.sessions.c.session_id == _SESSION_ID, t.turns.c.end_record_index.is_not(None))
        .order_by(t.turns.c.turn_index.desc())
        .limit(1)
    )


@lru_cache(maxsize=3)
def _turn_query(match: Any) -> Any:
    return select(*TURN_SELECT).select_from(TURNS_WITH_SESSION).where(match)


@lru_cache(maxsize=1)
def _reserve_query() -> Any:
    sessions = t.sessions
    return (
        update(sessions)
        .where(sessions.c.session_id == bindparam("p_session_id"), sessions.c.running_turn_id == bindparam("p_turn_id"))
        .values(record_count=sessions.c.record_count + bindparam("p_count"), version=sessions.c.version + 1)
        .returning(sessions.c.record_count)
    )


@lru_cache(maxsize=2)
def _insert_session(dialect: str) -> Any:
    """PostgreSQL draws the new session's integer key from its sequence; SQLite, whose writes are
    serialised, takes the largest plus one (a purged session's key may be taken again: its turns
    and records are gone by then)."""
    if dialect == "postgresql":
        return insert(t.sessions)
    return insert(t.sessions).values(sid=select(func.coalesce(func.max(t.sessions.c.sid), 0) + 1).scalar_subquery())


_INSERT_TURN = insert(t.turns).values(sid=sid_of(bindparam("session_id"))).inline()  # no RETURNING of the key


@lru_cache(maxsize=2)
def _insert_records(apart: bool) -> Any:
    return insert(t.records).values(sid=sid_of(bindparam("session_id"), t.record_sessions if apart else t.sessions)).inline()


@lru_cache(maxsize=2)
def _add_record_session(dialect: str) -> Any:
    """A records store apart: give the session its own integer key there, once (a second writer of
    the same session finds it made and changes nothing)."""
    keys = t.record_sessions
    values = {"session_id": bindparam("session_id"), "token": bindparam("token", type_=String)}
    if dialect == "postgresql":
        statement = postgresql.insert(keys).values(**values)
    else:
        next_sid = select(func.coalesce(func.max(keys.c.sid), 0) + 1).scalar_subquery()
        statement = sqlite.insert(keys).values(**values, sid=next_sid)
    # A key made before derived ids has no token yet: the first write that brings one sets it.
    return statement.on_conflict_do_update(
        index_elements=[keys.c.session_id], set_={"token": statement.excluded.token}, where=keys.c.token.is_(None)
    )


class Slot(NamedTuple):
    """A claimed turn slot: the new turn's index, its first record index, its key and its
    session's token."""

    index: int
    first: int
    turn_id: str
    token: str


class TurnIdTaken(IntegrityError):
    """A client's turn id the store cannot take (as a duplicate id is): the service answers 409."""

    def __init__(self, message: str) -> None:
        super().__init__(message, None, Exception(message))


def new_turn_key() -> Any:
    """SQL for the running turn's key: the client's (`:p_turn_id`), else the one derived from the
    session's token and the new turn's index (its turn count before this claim)."""
    sessions = t.sessions
    derived = bindparam("p_scope", type_=String) + sessions.c.token + "t" + cast(sessions.c.turn_count, String)
    return func.coalesce(bindparam("p_turn_id", type_=String), derived)


def stored_record(row: dict[str, Any]) -> dict[str, Any]:
    """A record row as inserted: without `token`, and NULL for the ids derived from it."""
    stored = {key: value for key, value in row.items() if key != "token"}
    token = row.get("token")
    if token:
        if stored["record_id"] == ids.record_id(token, stored["record_index"]):
            stored["record_id"] = None
        if ids.decoded(stored["turn_id"]) == (token, stored["turn_index"]):
            stored["turn_id"] = None
    return stored


class SessionStatements(Statements):
    def session(self, session_id: str, viewer: str | None = None) -> SessionRow | None:
        """The session with its lineage and, for a viewer, the grant it holds: one statement."""
        row = self.conn.execute(_session_query(), {"session_id": session_id, "viewer": viewer or ""}).mappings().first()
        return session_from(row, viewer) if row else None

    def session_for_write(
        self, session_id: str, viewer: str | None = None, lock: bool = False
    ) -> tuple[SessionRow, LeaseRow | None] | None:
        """The session, the viewer's grant and the writer lease (held or expired): the one statement
        a write needs. With `lock`, the session row stays locked until the transaction ends."""
        params = {"session_id": session_id, "viewer": viewer or ""}
        row = self.conn.execute(_session_for_write_query(lock), params).mappings().first()
        if row is None:
            return None
        lease = None
        if row["w_lease_id"] is not None:
            lease = LeaseRow(session_id, row["w_lease_id"], row["w_principal"], row["w_expires_at"])
        return session_from(row, viewer), lease

    def insert_session(self, row: dict[str, Any]) -> None:
        """A new session, with the token its turn and record ids derive from (store/ids.py)."""
        self.conn.execute(_insert_session(self.conn.dialect.name), {"token": secrets.token_hex(16), **row})

    def turn(self, turn_id: str) -> TurnRow | None:
        """The turn with this key, in any session of the key's project: one statement."""
        match, values = turn_match(turn_id)
        for row in self.conn.execute(_turn_query(match), values).mappings():
            turn = turn_from(row)
            if turn.turn_id == turn_id:  # a derived id names its project too
                return turn
        return None

    def last_finished_turn(
        self, session_id: str, turn_ranges: list[tuple[int, int | None]] | None = None
    ) -> TurnRow | None:
        """The session's last finished turn, among the turn index ranges given (segments.py)."""
        query = _last_finished_turn_query()
        if turn_ranges is not None and turn_ranges != [(0, None)]:
            index = t.turns.c.turn_index
            query = query.where(
                or_(*[and_(index >= low, index < high) if high is not None else index >= low for low, high in turn_ranges])
            )
        row = self.conn.execute(query, {"session_id": session_id}).mappings().first()
        return turn_from(row) if row else None

    def claim_turn_slot(self, session_id: str, turn_id: str | None) -> Slot | None:
        """Mark the session as running a new turn, `turn_id` (a client's) or the id derived from the
        session's token and the turn's index (None): the turn's slot, or None when another holds it."""
        self.refuse_taken_token(turn_id)
        params = {"p_session_id": session_id, "p_turn_id": turn_id, "p_scope": ids.key_scope(session_id)}
        row = self.conn.execute(_claim_turn_slot_query(), params).first()
        return Slot(row[0] - 1, row[1], row[2], row[3]) if row else None

    def refuse_taken_token(self, turn_id: str | None) -> None:
        """A client's turn id of the derived form whose token is a session's of the same project is
        taken: it would name that session's turn (store/ids.py). One statement, for such ids only."""
        found = ids.decoded(turn_id) if turn_id is not None else None
        if found is None or turn_id is None:
            return
        owner = self.conn.execute(
            select(t.sessions.c.session_id).where(t.sessions.c.token == found[0], in_scope(ids.key_scope(turn_id)))
        ).first()
        if owner is not None:
            raise TurnIdTaken(f"turn id {turn_id} is of the form of the ids this server makes")

    def insert_turn(self, row: dict[str, Any], token: str) -> None:
        """Insert a turn; its id is not stored when it is the one derived from `token` and its index."""
        derived = ids.decoded(row["turn_id"]) == (token, row["turn_index"])
        self.conn.execute(_INSERT_TURN, {**row, "turn_id": None} if derived else row)

    def finish_turn(self, turn_id: str, status: str, finished_at: str) -> int | None:
        """Close a running turn; returns its end record index (exclusive) or None."""
        row = self.conn.execute(_release_slot_query(), {"p_turn_id": turn_id}).first()
        if row is None:
            return None
        match, values = turn_match(turn_id)
        self.conn.execute(_close_turn_query(match), {**values, "p_status": status, "p_finished_at": finished_at, "p_end": row[0]})
        return int(row[0])

    def reserve_record_indexes(self, session_id: str, turn_id: str, count: int) -> int | None:
        """Reserve `count` record indexes for the running turn; the first index, or None."""
        params = {"p_session_id": session_id, "p_turn_id": turn_id, "p_count": count}
        row = self.conn.execute(_reserve_query(), params).first()
        return int(row[0]) - count if row else None

    def insert_records(self, rows: list[dict[str, Any]]) -> None:
        """Insert records (rows of `services/turn_steps.record_rows`); ids derived from the row's
        `token` and index are not stored (store/ids.py)."""
        conn = self.records_conn
        if self.records_apart:
            for session_id, token in dict.fromkeys((row["session_id"], row.get("token")) for row in rows):
                conn.execute(_add_record_session(conn.dialect.name), {"session_id": session_id, "token": token})
        conn.execute(_insert_records(self.records_apart), [stored_record(row) for row in rows])

    def release_record_indexes(self, session_id: str, turn_id: str, first: int, count: int) -> bool:
        """Give back indexes reserved for records that were never written, if no one came after."""
        result = self.conn.execute(
            update(t.sessions)
            .where(
                t.sessions.c.session_id == session_id,
                t.sessions.c.running_turn_id == turn_id,
                t.sessions.c.record_count == first + count,
            )
            .values(record_count=first, version=t.sessions.c.version + 1)
        )
        return result.rowcount == 1
