"""Routes of the transcript and lineage chapters: the reads."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id, query_cursor, query_int


class TranscriptHandlers(Handlers):
    chapter = "transcript"

    def routes(self) -> list[Route]:
        return [
            Route("/sessions/{session_id}/transcript", self.transcript, methods=["GET"]),
            Route("/sessions/{session_id}/records", self.records, methods=["GET"]),
            Route("/sessions/{session_id}/lineage", self.lineage, methods=["GET"]),
        ][: 2 if self.settings.legacy else 3]  # a legacy server has no lineage read

    async def transcript(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        cursor, limit = query_cursor(request), query_int(request, "limit")
        page = await self.read(self.services.transcript.transcript, principal, session_id, cursor, limit)
        return JSONResponse(page.as_json())

    async def records(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        cursor, limit = query_cursor(request), query_int(request, "limit")
        page = await self.read(self.services.transcript.own_records, principal, session_id, cursor, limit)
        return JSONResponse(page.as_json())

    async def lineage(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        return JSONResponse(await self.read(self.services.transcript.lineage, principal, session_id))
