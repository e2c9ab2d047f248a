"""Statements of the turn-writes chapter: the write's session read joined with the caller's
idempotency record, the one-statement claim of a whole turn, and the undo of an unanswered write."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import and_, bindparam, delete, select, update

from reference_impl.store import tables as t
from reference_impl.store import ids
from reference_impl.store.common import GRANT_ROLE, SESSION_COLUMNS, Statements, session_from, sessions_seen_by, turn_where
from reference_impl.store.sessions import new_turn_key
from reference_impl.store.rows import IdempotencyRow, LeaseRow, SessionRow

_KEY_COLUMNS = [
    t.idempotency_keys.c.idempotency_key.label("k_key"),
    t.idempotency_keys.c.fingerprint.label("k_fingerprint"),
    t.idempotency_keys.c.child_session_id.label("k_session_id"),
    t.idempotency_keys.c.response_status.label("k_status"),
    t.idempotency_keys.c.response_body.label("k_body"),
    t.idempotency_keys.c.expires_at.label("k_expires_at"),
]


@lru_cache(maxsize=2)
def _session_for_turn_write_query(keyed: bool) -> Any:
    """Built once per shape, with parameters (`:session_id`, `:viewer`, `:key`)."""
    leases, keys = t.session_leases, t.idempotency_keys
    viewer = bindparam("viewer")
    source = sessions_seen_by(viewer).outerjoin(leases, leases.c.session_id == t.sessions.c.session_id)
    columns = [
        *SESSION_COLUMNS,
        GRANT_ROLE,
        leases.c.lease_id.label("w_lease_id"),
        leases.c.principal.label("w_principal"),
        leases.c.expires_at.label("w_expires_at"),
    ]
    if keyed:
        source = source.outerjoin(keys, and_(keys.c.principal == viewer, keys.c.idempotency_key == bindparam("key")))
        columns += _KEY_COLUMNS
    return select(*columns).select_from(source).where(t.sessions.c.session_id == bindparam("session_id"))


@lru_cache(maxsize=2)
def _claim_turn_write_query(finish: bool) -> Any:
    sessions = t.sessions
    return (
        update(sessions)
        .where(
            sessions.c.session_id == bindparam("p_session_id"),
            sessions.c.running_turn_id.is_(None),
            sessions.c.suspended_turn_id.is_(None),  # a suspended turn holds the slot too
        )
        .values(
            running_turn_id=None if finish else new_turn_key(),
            turn_count=sessions.c.turn_count + 1,
            record_count=sessions.c.record_count + bindparam("p_count"),
            version=sessions.c.version + 1,
        )
        .returning(sessions.c.turn_count, sessions.c.record_count, sessions.c.child_count, sessions.c.token)
    )


class TurnWriteStatements(Statements):
    def session_for_turn_write(
        self, session_id: str, viewer: str, key: str | None
    ) -> tuple[SessionRow, LeaseRow | None, IdempotencyRow | None] | None:
        """The session, the viewer's grant, the writer lease and the viewer's record of `key`:
        one statement, so an idempotent write costs no extra round trip to find its replay."""
        params = {"session_id": session_id, "viewer": viewer or ""}
        if key is not None:
            params["key"] = key
        row = self.conn.execute(_session_for_turn_write_query(key is not None), params).mappings().first()
        if row is None:
            return None
        lease = None
        if row["w_lease_id"] is not None:
            lease = LeaseRow(session_id, row["w_lease_id"], row["w_principal"], row["w_expires_at"])
        stored = None
        if key is not None and row["k_key"] is not None:
            stored = IdempotencyRow(
                principal=viewer,
                idempotency_key=row["k_key"],
                fingerprint=row["k_fingerprint"],
                child_session_id=row["k_session_id"],
                response_status=row["k_status"],
                response_body=row["k_body"],
                expires_at=row["k_expires_at"],
            )
        return session_from(row, viewer), lease, stored

    def claim_turn_write(
        self, session_id: str, turn_id: str | None, count: int, finish: bool
    ) -> tuple[int, int, int, str, str] | None:
        """Start a turn with `count` records reserved, in one statement: (turn index, first record
        index, child count, turn key, session token) or None when another turn is running. The key
        is `turn_id` (a client's) or derived from the token and the index (store/ids.py). A finished
        turn leaves the session free (`finish`); otherwise the turn is the session's running one."""
        self.refuse_taken_token(turn_id)  # type: ignore[attr-defined]
        params: dict[str, Any] = {"p_session_id": session_id, "p_count": count}
        if not finish:
            params["p_turn_id"], params["p_scope"] = turn_id, ids.key_scope(session_id)
        row = self.conn.execute(_claim_turn_write_query(finish), params).first()
        if row is None:
            return None
        index, token = int(row[0]) - 1, str(row[3])
        key = turn_id if turn_id is not None else ids.turn_key(session_id, token, index)
        return index, int(row[1]) - count, int(row[2] or 0), key, token

    def undo_turn_write(
        self, session_id: str, turn_id: str, turn_index: int, first: int, count: int, child_count: int
    ) -> bool:
        """Take back a turn whose records the records store refused, if nothing came after it: no
        later turn, record or fork. Its turn row goes too; it was never answered."""
        sessions = t.sessions
        result = self.conn.execute(
            update(sessions)
            .where(
                sessions.c.session_id == session_id,
                sessions.c.turn_count == turn_index + 1,
                sessions.c.record_count == first + count,
                sessions.c.child_count == child_count,
                (sessions.c.running_turn_id == turn_id) | sessions.c.running_turn_id.is_(None),
            )
            .values(turn_count=turn_index, record_count=first, running_turn_id=None, version=sessions.c.version + 1)
        )
        if result.rowcount != 1:
            return False
        self.conn.execute(delete(t.turns).where(turn_where(turn_id)))
        return True
