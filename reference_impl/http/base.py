"""What every chapter's HTTP handlers share: the services, the caller, and checked bodies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from starlette.requests import Request
from starlette.routing import Route

from reference_impl.http.requests import json_body, principal_of
from reference_impl.http.threads import run_read
from reference_impl.principals import Caller
from reference_impl.services import Services
from reference_impl.settings import Settings

P = ParamSpec("P")
T = TypeVar("T")


class Handlers:
    """One chapter's routes. Subclasses name their `chapter` and list their `routes()`."""

    chapter: str = ""

    def __init__(self, services: Services, settings: Settings) -> None:
        self.services = services
        self.settings = settings
        # Reads run on the event loop when the store's reads never wait (http/threads.py).
        self.local_reads = bool(getattr(getattr(services.sessions, "store", None), "local_reads", False))

    async def read(self, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A read-only service call (`run_read`): on the loop on SQLite, else on a worker thread."""
        return await run_read(self.local_reads, func, *args, **kwargs)

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
