"""Statements of deletion: soft deletion, the child count a fork and a purge meet on, and purge."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import bindparam, delete, func, update

from reference_impl import diagnostics
from reference_impl.store import tables as t
from reference_impl.store.common import Statements, sid_of

_SESSION = bindparam("p_session_id")


@lru_cache(maxsize=1)
def _purge_statements() -> tuple[Any, ...]:
    """A purge's deletions, built once with a bound session id (in the order they run)."""
    owned = (t.attachments, t.session_grants, t.session_leases, t.session_reverts, t.turn_inputs)
    keyed = (t.turns, t.records)  # by the session's integer key
    return (
        *(delete(table).where(table.c.session_id == _SESSION) for table in owned),
        *(delete(table).where(table.c.sid == sid_of(_SESSION)) for table in keyed),
        delete(t.idempotency_keys).where(t.idempotency_keys.c.child_session_id == _SESSION),
        delete(t.session_lineage).where(t.session_lineage.c.session_id == _SESSION),
    )


@lru_cache(maxsize=1)
def _claim_child_slot() -> Any:
    sessions = t.sessions
    return (
        update(sessions)
        .where(sessions.c.session_id == _SESSION, sessions.c.deleted_at.is_(None))
        .values(child_count=sessions.c.child_count + 1)
    )


_DELETE_SESSION = delete(t.sessions).where(t.sessions.c.session_id == _SESSION)
# The rest of a purge, built once too: the cleanup of a run purges every session it made.
_MARK_PURGING = (
    update(t.sessions)
    .where(t.sessions.c.session_id == _SESSION, t.sessions.c.child_count == 0)
    .values(deleted_at=func.coalesce(t.sessions.c.deleted_at, bindparam("p_now", type_=t.sessions.c.deleted_at.type)))
)
_DELETE_RECORDS = {
    apart: delete(t.records).where(t.records.c.sid == sid_of(_SESSION, t.record_sessions if apart else t.sessions))
    for apart in (False, True)
}
_DELETE_RECORD_SESSION = delete(t.record_sessions).where(t.record_sessions.c.session_id == _SESSION)
_UNCOUNT_CHILD = (
    update(t.sessions).where(t.sessions.c.session_id == _SESSION).values(child_count=t.sessions.c.child_count - 1)
)


class DeletionStatements(Statements):
    def mark_deleted(self, session_id: str, now: str) -> bool:
        """Delete softly; False when the session was deleted already."""
        result = self.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id, t.sessions.c.deleted_at.is_(None))
            .values(deleted_at=now)
        )
        return result.rowcount == 1

    def claim_child_slot(self, session_id: str) -> bool:
        """Count a new child in, unless the session is deleted: the fork's guard against a purge.

        The update locks the session row, so a concurrent purge waits and then sees the child.
        """
        result = self.conn.execute(_claim_child_slot(), {"p_session_id": session_id})
        return result.rowcount == 1

    def mark_purging(self, session_id: str, now: str) -> bool:
        """Delete softly for good, if no child is counted; False when one is."""
        return self.conn.execute(_MARK_PURGING, {"p_session_id": session_id, "p_now": now}).rowcount == 1

    def delete_records_of(self, session_id: str) -> None:
        """Delete the session's records; each counts as a record examined (`Storage-Records-Examined`)."""
        deleted = self.records_conn.execute(_DELETE_RECORDS[self.records_apart], {"p_session_id": session_id}).rowcount
        diagnostics.count_records_examined(max(deleted or 0, 0))
        if self.records_apart:  # its key there goes too: a session made later with this id gets a new one
            self.records_conn.execute(_DELETE_RECORD_SESSION, {"p_session_id": session_id})

    def purge_session(self, session_id: str, parent_id: str | None) -> None:
        """Remove the session's own rows (its records are gone already) and uncount it from its
        parent; a second purge racing this one finds nothing left and uncounts nothing."""
        params = {"p_session_id": session_id}
        for statement in _purge_statements():
            self.conn.execute(statement, params)
        removed = self.conn.execute(_DELETE_SESSION, params).rowcount
        if removed == 1 and parent_id is not None:
            self.conn.execute(_UNCOUNT_CHILD, {"p_session_id": parent_id})
