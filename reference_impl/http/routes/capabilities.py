"""Routes of the capabilities chapter."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import spec
from reference_impl.http.base import Handlers


class CapabilitiesHandlers(Handlers):
    chapter = "capabilities"

    def routes(self) -> list[Route]:
        return [Route("/capabilities", self.capabilities, methods=["GET"])]

    async def capabilities(self, request: Request) -> Response:
        from reference_impl.http.routes.rollout import check_required

        check_required(request, self.services)
        return JSONResponse(self.services.capabilities.capabilities(spec.spec_version()))
