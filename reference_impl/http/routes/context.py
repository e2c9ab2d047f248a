"""Routes of the model-context chapter (capability `model-context`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id
from reference_impl.services.context import ContextService


class ContextHandlers(Handlers):
    chapter = "context"

    @property
    def context_service(self) -> ContextService:
        assert self.services.context is not None
        return self.services.context

    def routes(self) -> list[Route]:
        return [Route("/sessions/{session_id}/context", self.context, methods=["GET"])]

    async def context(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        return JSONResponse(await self.read(self.context_service.context, principal, session_id))
