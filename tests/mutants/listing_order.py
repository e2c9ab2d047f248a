"""Mutants: listings ordered other than by code point, and cursors that count instead of point."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp

from reference_impl import cursors
from reference_impl.services.listing import ListingService
from reference_impl.settings import Settings
from tests.mutants import app_with_service, mutant

EVERY = 1_000_000
LISTING = ("authorization.listing_order_under_adversarial_ids",)


@mutant("LIST-SESSIONS-001", select=LISTING,
        description="The listing pages by offset: a session deleted on an earlier page makes the next page skip one")
def listing_pages_by_offset(settings: Settings) -> ASGIApp:
    class Service(ListingService):
        def list_sessions(self, principal: str, cursor: str | None, limit: int | None) -> dict[str, Any]:
            size = self._page_size(limit)
            offset = 0 if cursor is None else cursors.decode(cursor, "sessions", str(principal)).index
            with self.store.read() as tx:
                rows = tx.visible_sessions(principal, "", EVERY)[offset:offset + size + 1]
            page = self._page(principal, rows, size, cursor, "sessions", str(principal))
            if rows:
                page["next_cursor"] = cursors.encode(cursors.Position("sessions", str(principal), "", offset + size))
            return page

    return app_with_service(settings, Service)


@mutant("LIST-SESSIONS-001", select=LISTING,
        description="The listing orders ids case-insensitively (as a locale collation would): 'a' before 'B'")
def listing_ordered_case_insensitively(settings: Settings) -> ASGIApp:
    class Service(ListingService):
        def list_sessions(self, principal: str, cursor: str | None, limit: int | None) -> dict[str, Any]:
            size = self._page_size(limit)
            after = self._after(cursor, "sessions", str(principal))
            folded = lambda key: (key.lower(), key)  # noqa: E731
            with self.store.read() as tx:
                rows = sorted(tx.visible_sessions(principal, "", EVERY), key=lambda row: folded(row.session_id))
            rows = [row for row in rows if not after or folded(row.session_id) > folded(after)][: size + 1]
            return self._page(principal, rows, size, cursor, "sessions", str(principal))

    return app_with_service(settings, Service)
