"""Routes of the Session Lineage API and the mapping of every error to a problem document."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import spec
from reference_impl import diagnostics
from reference_impl.errors import DomainError
from reference_impl.http.problems import problem
from reference_impl.http.requests import (
    idempotency_key,
    json_body,
    path_id,
    principal_of,
    query_int,
    query_cursor,
    writer_lease,
)
from reference_impl.service import LineageService
from reference_impl.settings import Settings
from reference_impl.store import Store
from reference_impl.store.engine import make_engine, migrate

log = logging.getLogger("reference_impl")
ROUND_TRIPS_HEADER = "Storage-Round-Trips"


class OutermostLayer:
    """ASGI middleware around everything else: the round-trip header, and the 500 problem.

    An unexpected failure is rendered here, inside the counting, so even that answer carries
    `Storage-Round-Trips` and is problem+json.
    """

    def __init__(self, app: ASGIApp, count_round_trips: bool) -> None:
        self.app = app
        self.count_round_trips = count_round_trips

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        counter = diagnostics.start_counting()
        started = False

        async def send_with_count(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if self.count_round_trips:
                    headers = list(message.get("headers", []))
                    headers.append((ROUND_TRIPS_HEADER.lower().encode(), str(counter.statements).encode()))
                    message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_count)
        except Exception as exc:
            log.exception("unexpected error", exc_info=exc)
            if started:
                raise
            await problem("internal", "internal server error")(scope, receive, send_with_count)


class Api:
    """Request handlers: read the request, call the service, render the answer."""

    def __init__(self, service: LineageService, settings: Settings) -> None:
        self.service = service
        self.settings = settings

    def principal(self, request: Request) -> str:
        return principal_of(request, self.settings.tokens)

    async def body(self, request: Request, schema_file: str) -> dict[str, Any]:
        return await json_body(request, schema_file, self.settings.limits.max_request_bytes)

    async def capabilities(self, request: Request) -> Response:
        return JSONResponse(self.service.capabilities(spec.spec_version()))

    async def create_session(self, request: Request) -> Response:
        principal = self.principal(request)
        body = await self.body(request, "session-create.json")
        result = await run_in_threadpool(self.service.create_session, principal, body)
        return JSONResponse(result, status_code=201)

    async def get_session(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        return JSONResponse(await run_in_threadpool(self.service.get_session, principal, session_id))

    async def start_turn(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        lease = writer_lease(request)
        body = await self.body(request, "turn-create.json")
        result = await run_in_threadpool(self.service.start_turn, principal, session_id, body, lease)
        return JSONResponse(result, status_code=201)

    async def append_records(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        turn_id = path_id(request, "turn_id")
        lease = writer_lease(request)
        body = await self.body(request, "records-append.json")
        result = await run_in_threadpool(
            self.service.append_records, principal, session_id, turn_id, body, lease
        )
        return JSONResponse(result, status_code=201)

    async def finish_turn(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        turn_id = path_id(request, "turn_id")
        lease = writer_lease(request)
        body = await self.body(request, "turn-finish.json")
        result = await run_in_threadpool(
            self.service.finish_turn, principal, session_id, turn_id, body, lease
        )
        return JSONResponse(result)

    async def lease(self, request: Request) -> Response:
        """One route for both methods, so a 405 lists both in `Allow`."""
        if request.method == "DELETE":
            return await self.release_lease(request)
        return await self.acquire_lease(request)

    async def acquire_lease(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        body = await self.body(request, "lease-request.json")
        status, result = await run_in_threadpool(
            self.service.acquire_lease, principal, session_id, body
        )
        return JSONResponse(result, status_code=status)

    async def release_lease(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        lease = writer_lease(request)
        await run_in_threadpool(self.service.release_lease, principal, session_id, lease)
        return Response(status_code=204)

    async def fork(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        key = idempotency_key(request)
        body = await self.body(request, "fork-request.json")
        outcome = await run_in_threadpool(self.service.fork, principal, session_id, body, key)
        return JSONResponse(
            outcome.body,
            status_code=outcome.status,
            headers={"Idempotency-Replayed": "true" if outcome.replayed else "false"},
        )

    async def transcript(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        cursor, limit = query_cursor(request), query_int(request, "limit")
        page = await run_in_threadpool(
            self.service.transcript, principal, session_id, cursor, limit
        )
        return JSONResponse(page.as_json())

    async def records(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        cursor, limit = query_cursor(request), query_int(request, "limit")
        page = await run_in_threadpool(
            self.service.own_records, principal, session_id, cursor, limit
        )
        return JSONResponse(page.as_json())

    async def lineage(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        return JSONResponse(await run_in_threadpool(self.service.lineage, principal, session_id))


async def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    response = problem(exc.kind, exc.detail)
    if response.status_code == 503:
        response.headers["Retry-After"] = "1"
    return response


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return problem("method-not-allowed", "method not allowed", headers=exc.headers)
    return problem("not-found", f"no resource at {request.url.path}")


async def _storage_error(request: Request, exc: Exception) -> Response:
    log.warning("storage unavailable: %s", exc)
    return problem("unavailable", "storage is unavailable; retry later", {"Retry-After": "1"})


def build_app(service: LineageService, settings: Settings) -> Starlette:
    """The ASGI application around a ready service (used by tests that swap layers)."""
    api = Api(service, settings)
    routes = [
        Route("/capabilities", api.capabilities, methods=["GET"]),
        Route("/sessions", api.create_session, methods=["POST"]),
        Route("/sessions/{session_id}", api.get_session, methods=["GET"]),
        Route("/sessions/{session_id}/turns", api.start_turn, methods=["POST"]),
        Route(
            "/sessions/{session_id}/turns/{turn_id}/records", api.append_records, methods=["POST"]
        ),
        Route("/sessions/{session_id}/turns/{turn_id}/finish", api.finish_turn, methods=["POST"]),
        Route("/sessions/{session_id}/fork", api.fork, methods=["POST"]),
        Route("/sessions/{session_id}/lease", api.lease, methods=["POST", "DELETE"]),
        Route("/sessions/{session_id}/transcript", api.transcript, methods=["GET"]),
        Route("/sessions/{session_id}/records", api.records, methods=["GET"]),
        Route("/sessions/{session_id}/lineage", api.lineage, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            DomainError: _domain_error,
            HTTPException: _http_error,
            DBAPIError: _storage_error,
        },
    )
    app.add_middleware(OutermostLayer, count_round_trips=settings.query_count_diagnostics)
    app.state.service = service
    return app


def create_app(settings: Settings) -> Starlette:
    """Open (and migrate) the database named by the settings, then build the application."""
    engine = make_engine(settings.database_url)
    migrate(engine)
    records_engine = None
    if settings.records_database_url:
        records_engine = make_engine(settings.records_database_url)
        migrate(records_engine, records_only=True)
    service = LineageService(Store(engine, records_engine), settings.limits, settings.query_count_diagnostics)
    return build_app(service, settings)
