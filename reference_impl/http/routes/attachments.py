"""Routes of attachments (capability `attachments`): raw bytes in, raw bytes out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import attachment_media_type, idempotency_key, path_id, raw_body
from reference_impl.http.threads import run_in_threadpool
from reference_impl.services.attachments import AttachmentsService, Stored


def stored(result: Stored) -> Response:
    return JSONResponse(
        result.body, status_code=201, headers={"Idempotency-Replayed": "true" if result.replayed else "false"}
    )


class AttachmentsHandlers(Handlers):
    chapter = "attachments"

    @property
    def attachments(self) -> AttachmentsService:
        assert self.services.attachments is not None
        return self.services.attachments

    def routes(self) -> list[Route]:
        return [
            Route("/sessions/{session_id}/attachments", self.upload, methods=["POST"]),
            Route(
                "/sessions/{session_id}/attachments/{attachment_id}",
                self.attachment,
                methods=["PUT", "GET", "DELETE"],
            ),
        ]

    async def _bytes(self, request: Request) -> tuple[str, bytes]:
        media_type = attachment_media_type(request)
        content = await raw_body(request, self.settings.limits.max_attachment_bytes, "max_attachment_bytes")
        return media_type, content

    async def upload(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        key = idempotency_key(request)
        media_type, content = await self._bytes(request)
        return stored(await run_in_threadpool(self.attachments.upload, principal, session_id, media_type, content, key))

    async def attachment(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        attachment_id = path_id(request, "attachment_id")
        if request.method == "PUT":
            media_type, content = await self._bytes(request)
            return stored(
                await run_in_threadpool(self.attachments.put, principal, session_id, attachment_id, media_type, content)
            )
        if request.method == "DELETE":
            await run_in_threadpool(self.attachments.delete, principal, session_id, attachment_id)
            return Response(status_code=204)
        row, content = await run_in_threadpool(self.attachments.read, principal, session_id, attachment_id)
        # Set the header directly: Starlette would add a charset to text/* media types.
        return Response(content, headers={"Content-Type": row.media_type})
