"""Chapter: authorization - the sessions a principal may read, and a session's branch family.

Both listings page by session id with opaque cursors bound to the listing (and, for the session
listing, to the caller); each page is one storage statement, plus the visibility check of the
session whose descendants are listed.
"""

from __future__ import annotations

from typing import Any

from reference_impl import cursors, views
from reference_impl.errors import InvalidRequest, PageSizeExceeded
from reference_impl.services.access import OWNER
from reference_impl.services.common import ChapterService
from reference_impl.store.rows import SessionRow


class ListingService(ChapterService):
    chapter = "listing"
    capabilities = ("sharing",)

    def list_sessions(self, principal: str, cursor: str | None, limit: int | None) -> dict[str, Any]:
        size = self._page_size(limit)
        after = self._after(cursor, "sessions", str(principal))
        with self.store.read() as tx:
            rows = tx.visible_sessions(principal, after, size + 1)
        return self._page(principal, rows, size, cursor, "sessions", str(principal))

    def descendants(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> dict[str, Any]:
        size = self._page_size(limit)
        with self.store.read() as tx:
            self.access.visible_session(tx, principal, session_id)
            after = self._after(cursor, "descendants", session_id)
            rows = tx.descendants(session_id, principal, after, size + 1, self.limits.max_lineage_depth)
        return self._page(principal, rows, size, cursor, "descendants", session_id)

    def _page_size(self, limit: int | None) -> int:
        if limit is None:
            return self.limits.default_page_size
        if limit < 1:
            raise InvalidRequest(f"limit {limit} is out of range: give 1 to {self.limits.max_page_size}")
        if limit > self.limits.max_page_size:
            raise PageSizeExceeded(f"limit {limit} is above max_page_size: give 1 to {self.limits.max_page_size}")
        return limit

    @staticmethod
    def _after(cursor: str | None, kind: str, listing: str) -> str:
        """The last session key of the previous page ('' from the start)."""
        return "" if cursor is None else cursors.decode(cursor, kind, listing).session_id

    def _page(
        self, principal: str, rows: list[SessionRow], size: int, cursor: str | None, kind: str, listing: str
    ) -> dict[str, Any]:
        has_more = len(rows) > size
        rows = rows[:size]
        next_cursor = cursor
        if rows:
            next_cursor = cursors.encode(cursors.Position(kind, listing, rows[-1].session_id, 0))
        items = [views.listed_session(row, self.access.role(principal, row) or OWNER) for row in rows]
        return {"sessions": items, "has_more": has_more, "next_cursor": next_cursor}
