"""Routes of the export chapter: the whole transcript (`transcript-export`) and a turn by position
(`turn-by-position`)."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from reference_impl.errors import InvalidRequest
from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id
from reference_impl.services.export import ExportService, TurnPositionService

POSITION = re.compile(r"[1-9][0-9]{0,14}")  # TURN-POS-RANGE-001: 1 to 15 digits, no sign, no leading zero


class ExportHandlers(Handlers):
    chapter = "export"

    @property
    def export_service(self) -> ExportService:
        assert self.services.export is not None
        return self.services.export

    def routes(self) -> list[Route]:
        return [Route("/sessions/{session_id}/export", self.export, methods=["GET"])]

    async def export(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        # A long export streams: the document's chunks are fetched and joined as the client reads them; every
        # statement was sent before the response starts, so the diagnostic headers count them all.
        document = await self.read(self.export_service.document, principal, session_id)
        if document.whole is not None:  # a short export, read whole: one body
            return Response(document.whole, media_type="application/json")
        return StreamingResponse(document.chunks(), media_type="application/json")


class TurnPositionHandlers(Handlers):
    chapter = "turn-positions"

    @property
    def positions(self) -> TurnPositionService:
        assert self.services.turn_positions is not None
        return self.services.turn_positions

    def routes(self) -> list[Route]:
        return [Route("/sessions/{session_id}/effective-turns/{position}", self.turn_at, methods=["GET"])]

    async def turn_at(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        raw = request.path_params["position"]
        if not POSITION.fullmatch(raw):
            raise InvalidRequest(
                "position must be a decimal integer of 1 to 15 digits without sign or leading zeros"
            )
        return JSONResponse(await self.read(self.positions.turn_at, principal, session_id, int(raw)))
