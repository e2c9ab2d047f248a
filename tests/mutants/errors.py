"""Mutants: errors (credentials, invisible sessions, problem documents, hostile input, schemas)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp

from reference_impl.errors import DomainError, SessionExists, TargetConflict, TurnInProgress
from reference_impl.http.app import build_app
from reference_impl.services import build_services
from reference_impl.services.access import Access
from reference_impl.services.common import timestamp
from reference_impl.services.sessions import SessionsService
from reference_impl.services.transcript import Page, TranscriptService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import ChainLink, SessionRow
from tests.mutants import app_with_service, app_with_transaction, mutant, open_store, reference_app, rewrite_responses

Headers = list[tuple[bytes, bytes]]
BodyHook = Callable[[dict[str, Any], bytes], dict[str, Any]]


def inspect_bodies(app: ASGIApp, hook: BodyHook) -> ASGIApp:
    """Wrap an app so each POST body is read by `hook(scope, body)` (which returns the scope to use) first."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        messages = []
        more = True
        while more:
            message = await receive()
            messages.append(message)
            more = message.get("type") == "http.request" and message.get("more_body", False)
        scope = hook(scope, b"".join(m.get("body", b"") for m in messages))
        replay = iter(messages)

        async def again() -> dict[str, Any]:
            return next(replay, {"type": "http.disconnect"})

        await app(scope, again, send)

    return wrapped


def _with_content_type(scope: dict[str, Any], media_type: bytes) -> dict[str, Any]:
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", media_type)]}


def _problem_json(body: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


# ---------------------------------------------------------------- authorization
@mutant("AUTH-REQUIRED-001", select=("authorization.credentials_required",),
        description="The server runs in development mode: any well-formed bearer token is accepted as its own principal")
def unknown_tokens_accepted(settings: Settings) -> ASGIApp:
    return reference_app(replace(settings, tokens={}))


@mutant("AUTH-HIDE-001", select=("authorization.invisible_sessions",),
        description="Ownership is never checked: every principal may read and write every session")
def sessions_visible_to_everyone(settings: Settings) -> ASGIApp:
    class Service(Access):
        @staticmethod
        def can_read(principal: str, session: SessionRow) -> bool:
            return True

    return app_with_service(settings, Service)


@mutant("AUTH-HIDE-001", select=("authorization.invisible_sessions",),
        description="Starting a turn checks for a running turn before ownership, so a hidden session answers 409")
def running_turn_leaks_hidden_session(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def start_turn(self, principal: str, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
            with self.store.read() as tx:
                session = tx.session(session_id)
            if session is not None and session.running_turn_id is not None:
                raise TurnInProgress(f"session {session_id!r} already has a running turn")
            return super().start_turn(principal, session_id, body)

    return app_with_service(settings, Service)


class Forbidden(DomainError):
    kind = "forbidden"


async def _forbidden(request: Request, exc: Exception) -> Response:
    problem = {"type": "urn:session-lineage:problem:forbidden", "title": "Forbidden", "status": 403, "detail": str(exc)}
    return JSONResponse(problem, status_code=403, media_type="application/problem+json")


@mutant("ERR-SCHEMA-001", "AUTH-HIDE-001", select=("authorization.invisible_sessions",),
        description="Another principal's session answers 403 forbidden, a status the spec does not declare")
def forbidden_instead_of_not_found(settings: Settings) -> ASGIApp:
    class Service(Access):
        def visible_session(self, tx: Transaction, principal: str, session_id: str) -> SessionRow:
            session = tx.session(session_id)
            if session is not None and not self.can_read(principal, session):
                raise Forbidden(f"session {session_id!r} belongs to another principal")
            return super().visible_session(tx, principal, session_id)

        def visible_chain(self, tx: Transaction, principal: str, session_id: str) -> list[ChainLink]:
            chain = tx.chain(session_id, max_hops=self.limits.max_lineage_depth)
            if chain and not all(self.can_read(principal, link.session) for link in chain):
                raise Forbidden(f"session {session_id!r} belongs to another principal")
            return super().visible_chain(tx, principal, session_id)

    app = app_with_service(settings, Service)
    app.add_exception_handler(Forbidden, _forbidden)
    return app


# ---------------------------------------------------------------- problem documents
@mutant("ERR-PROBLEM-001", select=("errors.problem_documents",),
        description="Problem documents are served as application/json")
def problems_served_as_plain_json(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        if status >= 400:
            headers = [(k, v) for k, v in headers if k.lower() != b"content-type"] + [(b"content-type", b"application/json")]
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("ERR-PROBLEM-001", select=("errors.problem_documents",),
        description="Every problem body says status 400, whatever the HTTP status")
def problem_status_always_400(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        problem = _problem_json(body) if status >= 400 else None
        if problem is None:
            return status, headers, body
        return status, headers, json.dumps({**problem, "status": 400}).encode()

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("ERR-TYPE-001", select=("errors.problem_documents",),
        description="Routing errors (unknown path, wrong method) use the generic type about:blank")
def router_errors_typed_about_blank(settings: Settings) -> ASGIApp:
    async def generic(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        problem = {"type": "about:blank", "title": exc.detail, "status": exc.status_code}
        return JSONResponse(problem, status_code=exc.status_code, media_type="application/problem+json", headers=exc.headers)

    app = reference_app(settings)
    app.add_exception_handler(HTTPException, generic)
    return app


@mutant("ERR-TYPE-001", select=("errors.problem_documents",),
        description="A taken session id is reported as target-conflict instead of session-exists")
def duplicate_session_reported_as_target_conflict(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
            try:
                return super().create_session(principal, body)
            except SessionExists as exc:
                raise TargetConflict(exc.detail) from exc

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- request bodies
@mutant("ERR-MEDIA-001", "ERR-MALFORMED-001", select=("errors.media_type", "errors.malformed_bodies"),
        description="The Content-Type is ignored: any body that parses is accepted, one that does not answers 415")
def media_type_sniffed_from_body(settings: Settings) -> ASGIApp:
    def sniff(scope: dict[str, Any], body: bytes) -> dict[str, Any]:
        try:
            json.loads(body)
        except (ValueError, RecursionError):
            return _with_content_type(scope, b"application/octet-stream")
        return _with_content_type(scope, b"application/json")

    return inspect_bodies(reference_app(settings), sniff)


@mutant("ERR-MEDIA-001", select=("errors.media_type",), description="Every body is read as JSON whatever its Content-Type.")
def content_type_ignored(settings: Settings) -> ASGIApp:
    """Every body is read as JSON whatever its Content-Type (ERR-MEDIA-001)."""
    return inspect_bodies(reference_app(settings), lambda scope, body: _with_content_type(scope, b"application/json"))


@mutant("ERR-SIZE-001", select=("errors.oversize_body",),
        description="The advertised max_request_bytes is not enforced on request bodies")
def request_size_not_enforced(settings: Settings) -> ASGIApp:
    services = build_services(open_store(settings), settings)
    unbounded = replace(settings, limits=replace(settings.limits, max_request_bytes=1 << 40))
    return build_app(services, unbounded)


@mutant("ERR-NO-5XX-001", select=("errors.hostile_input",),
        description="A body-logging layer parses JSON without a depth guard and deep nesting crashes it with a 500")
def deep_nesting_crashes_body_logger(settings: Settings) -> ASGIApp:
    def log_body(scope: dict[str, Any], body: bytes) -> dict[str, Any]:
        try:
            json.loads(body)
        except ValueError:
            pass
        return scope

    return inspect_bodies(reference_app(settings), log_body)


@mutant("ERR-NO-5XX-001", select=("errors.hostile_input",),
        description="Bodies are re-serialised with allow_nan=False before handling, so 1e999 crashes with a 500")
def huge_number_crashes_canonicaliser(settings: Settings) -> ASGIApp:
    def canonicalise(scope: dict[str, Any], body: bytes) -> dict[str, Any]:
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError):
            return scope
        json.dumps(parsed, allow_nan=False, sort_keys=True)
        return scope

    return inspect_bodies(reference_app(settings), canonicalise)


# ---------------------------------------------------------------- response schemas
@mutant("ERR-SCHEMA-001", select=("errors.every_operation_matches_schema",),
        description="GET /sessions/{id} reports created_at as Unix seconds instead of an RFC 3339 string")
def timestamps_as_epoch_seconds(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def get_session(self, principal: str, session_id: str) -> dict[str, Any]:
            view = super().get_session(principal, session_id)
            return {**view, "created_at": datetime.fromisoformat(view["created_at"]).timestamp()}

    return app_with_service(settings, Service)


class _PageWithoutFinalCursor(Page):
    def as_json(self) -> dict[str, Any]:
        document = super().as_json()
        if not self.has_more:
            del document["next_cursor"]
        return document


@mutant("ERR-SCHEMA-001", select=("errors.every_operation_matches_schema",),
        description="The last page of a transcript or records read omits the required next_cursor")
def next_cursor_omitted_on_last_page(settings: Settings) -> ASGIApp:
    def without_final_cursor(page: Page) -> Page:
        return _PageWithoutFinalCursor(page.session_id, page.records, page.has_more, page.next_cursor)

    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            return without_final_cursor(super().transcript(principal, session_id, cursor, limit))

        def own_records(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            return without_final_cursor(super().own_records(principal, session_id, cursor, limit))

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- rules made normative in 1.1
@mutant("ERR-MALFORMED-001", select=("errors.malformed_bodies",),
        description="A body nested deeper than the JSON parser goes is reported as malformed (400), not as too deep (422)")
def deep_nesting_reported_malformed(settings: Settings) -> ASGIApp:
    app = reference_app(settings)

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = b""
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            if body.count(b"{") > 900:
                problem = {"type": "urn:session-lineage:problem:malformed-json", "title": "Malformed", "status": 400,
                           "detail": "maximum recursion depth exceeded"}
                await JSONResponse(problem, 400, media_type="application/problem+json")(scope, receive, send)
                return

            async def replay() -> dict[str, Any]:
                return {"type": "http.request", "body": body, "more_body": False}

            await app(scope, replay, send)
            return
        await app(scope, receive, send)

    return wrapped


@mutant("ERR-ROUTE-001", select=("errors.routes",), description="A trailing slash is redirected (307) instead of naming no operation")
def trailing_slash_redirects(settings: Settings) -> ASGIApp:
    app = reference_app(settings)
    app.router.redirect_slashes = True  # type: ignore[attr-defined]
    return app


@mutant("AUTH-REQUIRED-001", select=("authorization.credentials_required",),
        description="Of several Authorization headers the first is used")
def first_authorization_header_wins(settings: Settings) -> ASGIApp:
    app = reference_app(settings)

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            kept, seen = [], False
            for name, value in scope["headers"]:
                if name.lower() == b"authorization":
                    if seen:
                        continue
                    seen = True
                kept.append((name, value))
            scope = {**scope, "headers": kept}
        await app(scope, receive, send)

    return wrapped


def _problem(status: int, kind: str) -> JSONResponse:
    body = {"type": f"urn:session-lineage:problem:{kind}", "title": kind, "status": status, "detail": kind}
    return JSONResponse(body, status, media_type="application/problem+json")


@mutant("ERR-PRECEDENCE-001", select=("errors.error_precedence",),
        description="A write looks the session up before it reads the body, so an unknown session beats a malformed body")
def session_checked_before_body(settings: Settings) -> ASGIApp:
    app = reference_app(settings)

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        parts = scope.get("path", "").split("/") if scope["type"] == "http" else []
        if scope["type"] == "http" and scope["method"] == "POST" and len(parts) >= 4 and parts[1] == "sessions":
            status: list[int] = []

            async def capture(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])

            async def nothing() -> dict[str, Any]:
                return {"type": "http.request", "body": b"", "more_body": False}

            lookup = {**scope, "method": "GET", "path": f"/sessions/{parts[2]}", "raw_path": f"/sessions/{parts[2]}".encode()}
            await app(lookup, nothing, capture)
            if status and status[0] == 404:
                await _problem(404, "not-found")(scope, receive, send)
                return
        await app(scope, receive, send)

    return wrapped


@mutant("ERR-PRECEDENCE-001", select=("errors.error_precedence",),
        description="The body size is checked before its media type, so an oversize text/plain body answers 413")
def size_checked_before_media_type(settings: Settings) -> ASGIApp:
    app = reference_app(settings)

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict((k.lower(), v) for k, v in scope["headers"])
            length = headers.get(b"content-length", b"0")
            if length.isdigit() and int(length) > settings.limits.max_request_bytes:
                await _problem(413, "payload-too-large")(scope, receive, send)
                return
        await app(scope, receive, send)

    return wrapped


@mutant("ERR-PROTOCOL-001", select=("errors.protocol_level_rejections",),
        description="A front end refuses valid but odd headers (an empty value, a [ in a value) with 400 text/plain")
def odd_headers_refused_as_plain_text(settings: Settings) -> ASGIApp:
    app = reference_app(settings)

    async def strict_front(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and any(not value or b"[" in value for _, value in scope["headers"]):
            body = b"Invalid HTTP request received."
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return strict_front


# ---------------------------------------------------------------- deterministic hostile input
def _integers(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, dict):
        return [n for item in value.values() for n in _integers(item)]
    if isinstance(value, list):
        return [n for item in value for n in _integers(item)]
    return []


@mutant("ERR-NO-5XX-001", select=("errors.hostile_content",),
        description="Record content goes to a store of 64-bit integers: 2^63 and above crash the append with a 500")
def big_integers_overflow_storage(settings: Settings) -> ASGIApp:
    from reference_impl.store import Transaction

    class Tx(Transaction):
        def insert_records(self, rows: list[dict[str, Any]]) -> None:
            for row in rows:
                for number in _integers(json.loads(row["content"])):
                    if not -(2**63) <= number < 2**63:
                        raise OverflowError(f"{number} does not fit a BIGINT")
            super().insert_records(rows)

    return app_with_transaction(settings, Tx)


@mutant("ERR-NO-5XX-001", select=("errors.hostile_content",),
        description="Record content goes to a JSON column that cannot hold NUL: a \\u0000 in content crashes with a 500")
def nul_in_content_crashes_storage(settings: Settings) -> ASGIApp:
    from reference_impl.store import Transaction

    class Tx(Transaction):
        def insert_records(self, rows: list[dict[str, Any]]) -> None:
            if any("\\u0000" in row["content"] for row in rows):
                raise ValueError("unsupported Unicode escape sequence: \\u0000 cannot be converted to text")
            super().insert_records(rows)

    return app_with_transaction(settings, Tx)


@mutant("ERR-NO-5XX-001", select=("errors.hostile_parameters",),
        description="A cursor is decoded as ASCII before it is validated: a non-ASCII cursor crashes with a 500")
def non_ascii_cursor_crashes(settings: Settings) -> ASGIApp:
    from reference_impl.services.transcript import Page, TranscriptService

    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            if cursor is not None:
                cursor.encode("ascii")  # UnicodeEncodeError on anything else
            return super().transcript(principal, session_id, cursor, limit)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- refusals that are not schema violations
@mutant("ERR-REFUSAL-TYPE-001", select=("errors.refusals_say_what_they_are",),
        description="Limits and rules refuse as in 1.2: page size, lease length and owner grants answer invalid-request")
def refusals_as_schema_violations(settings: Settings) -> ASGIApp:
    own_types = {b"page-size-exceeded", b"lease-too-long", b"grant-to-owner"}

    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        if status != 422:
            return status, headers, body
        problem = json.loads(body)
        if problem.get("type", "").encode().rsplit(b":", 1)[-1] in own_types:
            problem.update(type="urn:session-lineage:problem:invalid-request", title="The request does not match the schema")
            body = json.dumps(problem).encode()
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)
