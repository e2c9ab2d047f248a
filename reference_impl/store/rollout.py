"""Statements of the rollout chapter: the pending rewind action."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, delete, insert, select

from reference_impl.store import tables as t
from reference_impl.store.common import Statements


# Built once with a bound session id: a purge runs it for every session it removes.
_DELETE_PENDING = delete(t.pending_actions).where(t.pending_actions.c.session_id == bindparam("p_session_id"))


class RolloutStatements(Statements):
    def insert_pending_action(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.pending_actions).values(**row))

    def pending_action(self, session_id: str) -> dict[str, Any] | None:
        """The session's pending action (mode, draft), or None: one statement."""
        row = self.conn.execute(
            select(t.pending_actions.c.mode, t.pending_actions.c.draft).where(t.pending_actions.c.session_id == session_id)
        ).mappings().first()
        return dict(row) if row else None

    def clear_pending_action(self, session_id: str) -> bool:
        """Remove the session's pending action; whether there was one."""
        return self.conn.execute(_DELETE_PENDING, {"p_session_id": session_id}).rowcount == 1

    def delete_pending_action(self, session_id: str) -> None:
        """A purge removes the session's pending action with it."""
        self.conn.execute(_DELETE_PENDING, {"p_session_id": session_id})
