"""Statements of the revert chapter: the compare-and-swap of a session's own effective segments on
its version, and the revert history."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update

from reference_impl.store import tables as t
from reference_impl.store.common import Statements


class RevertStatements(Statements):
    def apply_revert(self, session_id: str, version: int, own_segments: str) -> tuple[int, int] | None:
        """Make `own_segments` current if the session is still at `version` and runs no turn:
        (new version, new revision), or None. The version test is the compare-and-swap;
        a running or suspended turn (which also bumps the version) refuses it too."""
        sessions = t.sessions
        row = self.conn.execute(
            update(sessions)
            .where(
                sessions.c.session_id == session_id,
                sessions.c.version == version,
                sessions.c.running_turn_id.is_(None),
                sessions.c.suspended_turn_id.is_(None),
            )
            .values(own_segments=own_segments, version=sessions.c.version + 1, revision=sessions.c.revision + 1)
            .returning(sessions.c.version, sessions.c.revision)
        ).first()
        return (int(row[0]), int(row[1])) if row else None

    def insert_revert(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.session_reverts).values(**row))

    def reverts(self, session_id: str) -> list[dict[str, Any]]:
        query = (
            select(t.session_reverts)
            .where(t.session_reverts.c.session_id == session_id)
            .order_by(t.session_reverts.c.revision)
        )
        return [dict(row) for row in self.conn.execute(query).mappings()]
