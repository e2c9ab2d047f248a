"""The application: chapters' routes mounted together, the outermost middleware, and the mapping
of every error to a problem document."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import DBAPIError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reference_impl import diagnostics
from reference_impl.errors import DomainError
from reference_impl.http.problems import problem
from reference_impl.http.routes import CHAPTERS
from reference_impl.principals import DEFAULT_PROJECT, KEY_SEPARATOR
from reference_impl.services import Services, build_services
from reference_impl.settings import Settings
from reference_impl.store import Store, Transaction
from reference_impl.store.engine import make_engine, migrate

log = logging.getLogger("reference_impl")
ROUND_TRIPS_HEADER = "Storage-Round-Trips"
ITEMS_WRITTEN_HEADER = "Storage-Items-Written"
BYTES_WRITTEN_HEADER = "Storage-Bytes-Written"  # with the items written (diagnostics.write-count, since 1.3.0)
RECORDS_EXAMINED_HEADER = "Storage-Records-Examined"


class OutermostLayer:
    """ASGI middleware around everything else: the diagnostic headers, and the 500 problem.

    An unexpected failure is rendered here, inside the counting, so even that answer carries
    `Storage-Round-Trips`, `Storage-Items-Written` and `Storage-Records-Examined` and is problem+json. The headers are added
    when the response starts: every transaction of the request has ended by then.
    """

    def __init__(
        self, app: ASGIApp, count_round_trips: bool, count_writes: bool = False, count_records_examined: bool = False
    ) -> None:
        self.app = app
        self.count_round_trips = count_round_trips
        self.count_writes = count_writes
        self.count_records_examined = count_records_examined

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
                headers = list(message.get("headers", []))
                if self.count_round_trips:
                    headers.append((ROUND_TRIPS_HEADER.lower().encode(), str(counter.statements).encode()))
                if self.count_writes:
                    headers.append((ITEMS_WRITTEN_HEADER.lower().encode(), str(counter.items_written).encode()))
                    headers.append((BYTES_WRITTEN_HEADER.lower().encode(), str(counter.bytes_written).encode()))
                if self.count_records_examined:
                    headers.append((RECORDS_EXAMINED_HEADER.lower().encode(), str(counter.records_examined).encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_count)
        except Exception as exc:
            log.exception("unexpected error", exc_info=exc)
            if started:
                raise
            await problem("internal", "internal server error")(scope, receive, send_with_count)


async def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    response = problem(exc.kind, public_text(request, exc.detail), members=getattr(exc, "members", None))
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


def public_text(request: Request, text: str) -> str:
    """A detail with the store keys of the caller's project written as the ids the caller knows."""
    caller = getattr(request.state, "caller", None)
    if caller is None or caller.project == DEFAULT_PROJECT:
        return text
    return text.replace(caller.project + KEY_SEPARATOR, "")


def merge_routes(routes: list[Route]) -> list[Route]:
    """One route per path: chapters add methods to the same path (`GET /sessions` next to
    `POST /sessions`), and a 405 must list every method the path allows in `Allow`."""
    by_path: dict[str, list[Route]] = {}
    for route in routes:
        by_path.setdefault(route.path, []).append(route)
    merged = []
    for path, group in by_path.items():
        if len(group) == 1:
            merged.append(group[0])
            continue
        endpoints = {method: route.endpoint for route in group for method in route.methods or ()}

        async def dispatch(request: Request, endpoints: dict[str, Any] = endpoints) -> Response:
            return await endpoints[request.method](request)

        merged.append(Route(path, dispatch, methods=sorted(endpoints)))
    return merged


def build_app(services: Services, settings: Settings) -> Starlette:
    """The ASGI application around ready services (tests build services with substitutes)."""
    running = {chapter.chapter for chapter in services.chapters()} | {"capabilities"}
    routes = merge_routes([
        route
        for handlers in CHAPTERS
        if handlers.chapter in running
        for route in handlers(services, settings).routes()
    ])
    app = Starlette(
        routes=routes,
        exception_handlers={
            DomainError: _domain_error,
            HTTPException: _http_error,
            DBAPIError: _storage_error,
        },
    )
    app.router.redirect_slashes = False  # a trailing slash names no operation: 404, never a redirect
    app.add_middleware(
        OutermostLayer,
        count_round_trips=settings.query_count_diagnostics,
        count_writes=settings.write_count_diagnostics,
        count_records_examined=settings.records_examined_diagnostics and not settings.legacy,  # not in profile legacy
    )
    app.state.services = services
    return app


def open_store(settings: Settings, transaction_class: type[Transaction] = Transaction) -> Store:
    """Open (and migrate) the databases the settings name."""
    engine = make_engine(settings.database_url)
    migrate(engine)
    records_engine = None
    if settings.records_database_url:
        records_engine = make_engine(settings.records_database_url)
        migrate(records_engine, records_only=True)
    return Store(engine, records_engine, transaction_class)


def start_deployment(settings: Settings) -> None:
    """What a server's start does once for all its processes: migrate the databases, and report
    the turns left running interrupted (SUSPEND-INTERRUPTED-001). `serve --workers N` calls it in
    the supervisor, before any worker starts: a worker that starts after another already serves,
    or that the supervisor restarts, must not interrupt the turns the other workers are running."""
    store = open_store(settings)
    try:
        services = build_services(store, settings)
        if services.suspend is not None:
            services.suspend.interrupt_running_turns()
    finally:
        for engine in (store.engine, store.records_engine):
            if engine is not None:
                engine.dispose()


def create_app(settings: Settings, started: bool = False) -> Starlette:
    """Open (and migrate) the database named by the settings, then build the application; traced
    when the settings name an OTLP endpoint (its flush-and-stop call in `app.state.stop_tracing`).
    Unless `started` (a worker of a deployment whose start `start_deployment` did), the turns left
    running are reported interrupted first (SUSPEND-INTERRUPTED-001)."""
    store = open_store(settings)
    services = build_services(store, settings)
    if services.suspend is not None and not started:
        services.suspend.interrupt_running_turns()  # SUSPEND-INTERRUPTED-001: turns left running
    app = build_app(services, settings)
    app.state.stop_tracing = lambda: None
    if settings.otlp_endpoint:  # after the migration: its statements belong to no request
        from reference_impl.telemetry import instrument

        engines = [engine for engine in (store.engine, store.records_engine) if engine is not None]
        app.state.stop_tracing = instrument(app, engines, settings.otlp_endpoint)
    return app
