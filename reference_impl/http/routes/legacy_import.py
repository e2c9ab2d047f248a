"""Routes of the legacy-import chapter (capability `legacy-import`): a streamed upload."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.requests import UnsupportedMediaType, writer_lease
from reference_impl.services.legacy_import import ImportService

MEDIA_TYPES = ("application/x-ndjson", "application/jsonl", "application/octet-stream")


class ImportHandlers(Handlers):
    chapter = "legacy_import"

    @property
    def imports(self) -> ImportService:
        assert self.services.legacy_import is not None
        return self.services.legacy_import

    def routes(self) -> list[Route]:
        return [Route("/imports", self.import_history, methods=["POST"])]

    async def import_history(self, request: Request) -> Response:
        principal = self.principal(request)
        lease = writer_lease(request)
        values = request.headers.getlist("content-type")
        media_type = values[0].split(";")[0].strip().lower() if len(values) == 1 else ""
        if media_type not in MEDIA_TYPES:
            raise UnsupportedMediaType(f"a legacy history is uploaded as {' or '.join(MEDIA_TYPES)}")
        try:
            status, body = await self.imports.import_stream(principal, request.stream(), lease)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening; what was imported stays
        return JSONResponse(body, status_code=status)
