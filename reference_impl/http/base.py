"""What every chapter's HTTP handlers share: the services, the caller, and checked bodies."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from reference_impl.http.requests import json_body, principal_of
from reference_impl.principals import Caller
from reference_impl.services import Services
from reference_impl.settings import Settings


class Handlers:
    """One chapter's routes. Subclasses name their `chapter` and list their `routes()`."""

    chapter: str = ""

    def __init__(self, services: Services, settings: Settings) -> None:
        self.services = services
        self.settings = settings

    def principal(self, request: Request) -> Caller:
        """The caller (401 without valid credentials), then the capabilities the request relies on
        (`Requires-Capabilities`, 412 when one is missing): both before any other rule."""
        caller = principal_of(request, self.settings.tokens, self.settings.projects)
        from reference_impl.http.routes.rollout import check_required

        check_required(request, self.services)
        return caller

    async def body(self, request: Request, schema_file: str) -> dict[str, Any]:
        return await json_body(request, schema_file, self.settings.limits.max_request_bytes)

    def routes(self) -> list[Route]:
        raise NotImplementedError
