"""Statements of the session-patch chapter: the compare-and-swap of a session's metadata on its
version."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from reference_impl.store import tables as t
from reference_impl.store.common import Statements


class SessionPatchStatements(Statements):
    def patch_session(self, session_id: str, version: int, values: dict[str, Any]) -> int | None:
        """Set the metadata `values` if the session is still at `version`: the new version, or None."""
        sessions = t.sessions
        row = self.conn.execute(
            update(sessions)
            .where(sessions.c.session_id == session_id, sessions.c.version == version)
            .values(**values, version=sessions.c.version + 1)
            .returning(sessions.c.version)
        ).first()
        return int(row[0]) if row else None
