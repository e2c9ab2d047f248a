"""Routes of the session and descendant listings (capability `sharing`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id, query_cursor, query_int
from reference_impl.services.listing import ListingService


class ListingHandlers(Handlers):
    chapter = "listing"

    @property
    def listing(self) -> ListingService:
        assert self.services.listing is not None
        return self.services.listing

    def routes(self) -> list[Route]:
        return [
            Route("/sessions", self.list_sessions, methods=["GET"]),
            Route("/sessions/{session_id}/descendants", self.descendants, methods=["GET"]),
        ]

    async def list_sessions(self, request: Request) -> Response:
        principal = self.principal(request)
        cursor, limit = query_cursor(request), query_int(request, "limit")
        return JSONResponse(await self.read(self.listing.list_sessions, principal, cursor, limit))

    async def descendants(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        cursor, limit = query_cursor(request), query_int(request, "limit")
        return JSONResponse(await self.read(self.listing.descendants, principal, session_id, cursor, limit))
