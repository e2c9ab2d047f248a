"""Routes of grants and the caller (capability `sharing`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id, path_principal
from reference_impl.http.threads import run_in_threadpool
from reference_impl.services.grants import GrantsService


class GrantsHandlers(Handlers):
    chapter = "grants"

    @property
    def grants(self) -> GrantsService:
        assert self.services.grants is not None
        return self.services.grants

    def routes(self) -> list[Route]:
        return [
            Route("/me", self.me, methods=["GET"]),
            Route("/sessions/{session_id}/grants", self.list_grants, methods=["GET"]),
            Route("/sessions/{session_id}/grants/{principal_id}", self.grant, methods=["PUT", "DELETE"]),
        ]

    async def me(self, request: Request) -> Response:
        return JSONResponse(self.grants.me(self.principal(request)))

    async def list_grants(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        return JSONResponse(await self.read(self.grants.list_grants, principal, session_id))

    async def grant(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        grantee = path_principal(request)
        if request.method == "DELETE":
            await run_in_threadpool(self.grants.revoke_grant, principal, session_id, grantee)
            return Response(status_code=204)
        body = await self.body(request, "grant-request.json")
        return JSONResponse(await run_in_threadpool(self.grants.put_grant, principal, session_id, grantee, body))
