"""Routes of the revert chapter (mounted only when the server runs `revert`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.etags import parse_if_match
from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id, scope_ids, writer_lease
from reference_impl.http.threads import run_in_threadpool
from reference_impl.services.revert import RevertService


class RevertHandlers(Handlers):
    chapter = "revert"

    @property
    def service(self) -> RevertService:
        assert self.services.revert is not None
        return self.services.revert

    def routes(self) -> list[Route]:
        return [
            Route("/sessions/{session_id}/revert", self.revert, methods=["POST"]),
            Route("/sessions/{session_id}/reverts", self.reverts, methods=["GET"]),
        ]

    async def revert(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        lease = writer_lease(request)
        body = scope_ids(principal, await self.body(request, "revert-request.json"), ("turn_id",))
        if_match = parse_if_match(request.headers.getlist("if-match"))
        result = await run_in_threadpool(self.service.revert, principal, session_id, body, lease, if_match)
        return JSONResponse(result, headers={"ETag": result.etag})

    async def reverts(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        return JSONResponse(await self.read(self.service.reverts, principal, session_id))
