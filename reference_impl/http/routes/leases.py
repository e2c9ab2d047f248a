"""Routes of the writer-leases chapter (mounted only when the server runs `writer-lease`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import path_id, writer_lease
from reference_impl.http.threads import run_in_threadpool
from reference_impl.services.leases import LeasesService


class LeasesHandlers(Handlers):
    chapter = "leases"

    @property
    def leases(self) -> LeasesService:
        assert self.services.leases is not None
        return self.services.leases

    def routes(self) -> list[Route]:
        # One route for both methods, so a 405 lists both in `Allow`.
        return [Route("/sessions/{session_id}/lease", self.lease, methods=["POST", "DELETE"])]

    async def lease(self, request: Request) -> Response:
        if request.method == "DELETE":
            return await self.release_lease(request)
        return await self.acquire_lease(request)

    async def acquire_lease(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        body = await self.body(request, "lease-request.json")
        status, result = await run_in_threadpool(self.leases.acquire_lease, principal, session_id, body)
        return JSONResponse(result, status_code=status)

    async def release_lease(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        lease = writer_lease(request)
        await run_in_threadpool(self.leases.release_lease, principal, session_id, lease)
        return Response(status_code=204)
