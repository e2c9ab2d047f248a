"""Statements of the listings: the sessions a principal may read, and a session's descendants.

Each page is one statement, whatever the depth of the sessions and the number of branches: the
listing is a union of two index range scans (owned, granted), the descendants one recursive query.
"""

from __future__ import annotations

from sqlalchemy import literal, select, text, union_all

from reference_impl.store import tables as t
from reference_impl.store.common import SESSION_COLUMNS, Statements, session_from
from reference_impl.store.rows import SessionRow

# Listings are in code-point order of ids (LIST-SESSIONS-001). SQLite compares text by bytes; a
# PostgreSQL database may have a locale or ICU collation (`a` before `B`), so it is told.
CODE_POINTS = {"postgresql": ' COLLATE "C"'}

DESCENDANTS_SQL = """
WITH RECURSIVE family(session_id, hops) AS (
    SELECT l.session_id, 1 FROM session_lineage l WHERE l.parent_session_id = :session_id
  UNION ALL
    SELECT l.session_id, f.hops + 1
    FROM family f JOIN session_lineage l ON l.parent_session_id = f.session_id
    WHERE f.hops < :max_hops
)
SELECT s.session_id, s.owner, s.name, s.description, s.created_at, s.depth,
       s.turn_count, s.record_count, s.running_turn_id, s.deleted_at, s.child_count,
       g.role AS g_role,
       l.parent_session_id AS l_parent_session_id, l.root_session_id AS l_root_session_id,
       l.depth AS l_depth, l.inherited_turn_count AS l_inherited_turn_count,
       l.cut_mode AS l_cut_mode, l.cut_turn_id AS l_cut_turn_id,
       l.cutoff_session_id AS l_cutoff_session_id, l.cutoff_turn_index AS l_cutoff_turn_index,
       l.cutoff_record_index AS l_cutoff_record_index, l.created_at AS l_created_at
FROM family f
JOIN sessions s ON s.session_id = f.session_id
LEFT JOIN session_lineage l ON l.session_id = s.session_id
LEFT JOIN session_grants g ON g.session_id = s.session_id AND g.principal = :viewer
WHERE s.deleted_at IS NULL AND (s.owner = :viewer OR g.role IS NOT NULL) AND s.session_id{collate} > :after
ORDER BY s.session_id{collate}
LIMIT :limit
"""


class ListingStatements(Statements):
    def visible_sessions(self, viewer: str, after: str, limit: int) -> list[SessionRow]:
        """Sessions the viewer owns or holds a grant on, not deleted, after `after` in key order."""
        sessions, grants = t.sessions, t.session_grants
        collation = CODE_POINTS.get(self.conn.dialect.name)
        key = (lambda column: column.collate("C")) if collation else (lambda column: column)
        owned = (
            select(sessions.c.session_id.label("sid"), literal(None).label("g_role"))
            .where(sessions.c.owner == viewer, sessions.c.deleted_at.is_(None), key(sessions.c.session_id) > after)
            .order_by(key(sessions.c.session_id))
            .limit(limit)
        )
        granted = (
            select(grants.c.session_id.label("sid"), grants.c.role.label("g_role"))
            .join(sessions, sessions.c.session_id == grants.c.session_id)
            .where(grants.c.principal == viewer, sessions.c.deleted_at.is_(None), key(grants.c.session_id) > after)
            .order_by(key(grants.c.session_id))
            .limit(limit)
        )
        visible = union_all(owned.subquery().select(), granted.subquery().select()).subquery("visible")
        query = (
            select(*SESSION_COLUMNS, visible.c.g_role)
            .select_from(
                visible.join(sessions, sessions.c.session_id == visible.c.sid).outerjoin(
                    t.session_lineage, t.session_lineage.c.session_id == sessions.c.session_id
                )
            )
            .order_by(key(sessions.c.session_id))
            .limit(limit)
        )
        return [session_from(row, viewer) for row in self.conn.execute(query).mappings()]

    def descendants(self, session_id: str, viewer: str, after: str, limit: int, max_hops: int) -> list[SessionRow]:
        """Descendants of the session the viewer owns or holds a grant on, not deleted, in key order."""
        collate = CODE_POINTS.get(self.conn.dialect.name, "")
        rows = self.conn.execute(
            text(DESCENDANTS_SQL.format(collate=collate)),
            {"session_id": session_id, "viewer": viewer, "after": after, "limit": limit, "max_hops": max_hops},
        ).mappings()
        return [session_from(row, viewer) for row in rows]
