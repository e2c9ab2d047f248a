"""Routes of deletion and purge (capability `sharing`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id
from reference_impl.http.threads import run_in_threadpool
from reference_impl.services.deletion import DeletionService


class DeletionHandlers(Handlers):
    chapter = "deletion"

    @property
    def deletion(self) -> DeletionService:
        assert self.services.deletion is not None
        return self.services.deletion

    def routes(self) -> list[Route]:
        return [
            Route("/sessions/{session_id}", self.delete_session, methods=["DELETE"]),
            Route("/sessions/{session_id}/purge", self.purge_session, methods=["POST"]),
        ]

    async def delete_session(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        await run_in_threadpool(self.deletion.delete_session, principal, session_id)
        return Response(status_code=204)

    async def purge_session(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        await run_in_threadpool(self.deletion.purge_session, principal, session_id)
        return Response(status_code=204)
