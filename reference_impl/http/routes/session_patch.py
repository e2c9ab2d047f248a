"""Routes of the session-patch chapter (mounted only when the server runs `session-patch`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.etags import parse_if_match
from reference_impl.http.base import Handlers
from reference_impl.http.requests import UnsupportedMediaType, path_id, writer_lease
from reference_impl.http.threads import run_in_threadpool
from reference_impl.services.session_patch import SessionPatchService

MERGE_PATCH = "application/merge-patch+json"


class SessionPatchHandlers(Handlers):
    chapter = "session-patch"

    @property
    def service(self) -> SessionPatchService:
        assert self.services.session_patch is not None
        return self.services.session_patch

    def routes(self) -> list[Route]:
        return [Route("/sessions/{session_id}", self.patch, methods=["PATCH"])]

    async def patch(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        lease = writer_lease(request)
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type != MERGE_PATCH:
            raise UnsupportedMediaType(f"a session patch is a JSON Merge Patch: send Content-Type {MERGE_PATCH}")
        body = await self.body(request, "session-patch.json")
        if_match = parse_if_match(request.headers.getlist("if-match"))
        result = await run_in_threadpool(self.service.patch, principal, session_id, body, lease, if_match)
        return JSONResponse(result, headers={"ETag": result.etag})
