"""Routes of the sessions chapter: sessions, turns and records."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.errors import InvalidRequest
from reference_impl.http.requests import idempotency_key, path_id, scope_ids, writer_lease
from reference_impl.http.routes.rollout import start_turn_with_replay
from reference_impl.http.threads import run_in_threadpool


def etag_header(view: Any) -> dict[str, str]:
    """The `ETag` of a response that shows a session (revert and session-patch compare it)."""
    tag = getattr(view, "etag", None)
    return {"ETag": tag} if tag else {}


class SessionsHandlers(Handlers):
    chapter = "sessions"

    def routes(self) -> list[Route]:
        return [
            Route("/sessions", self.create_session, methods=["POST"]),
            Route("/sessions/{session_id}", self.get_session, methods=["GET"]),
            Route("/sessions/{session_id}/turns", self.start_turn, methods=["POST"]),
            Route("/sessions/{session_id}/turns/{turn_id}/records", self.append_records, methods=["POST"]),
            Route("/sessions/{session_id}/turns/{turn_id}/finish", self.finish_turn, methods=["POST"]),
        ]

    async def create_session(self, request: Request) -> Response:
        principal = self.principal(request)
        body = scope_ids(principal, await self.body(request, "session-create.json"), ("session_id",))
        result = await run_in_threadpool(self.services.sessions.create_session, principal, body)
        return JSONResponse(result, status_code=201, headers=etag_header(result))

    async def get_session(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        result = await self.read(self.services.sessions.get_session, principal, session_id)
        return JSONResponse(result, headers=etag_header(result))

    def _written(self, outcome: Any) -> Response:
        return JSONResponse(
            outcome.body,
            status_code=outcome.status,
            headers={"Idempotency-Replayed": "true" if outcome.replayed else "false"},
        )

    async def start_turn(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        writes = self.services.turn_writes
        key = idempotency_key(request) if writes is not None else None
        lease = writer_lease(request)
        body = scope_ids(principal, await self.body(request, "turn-create.json"), ("turn_id",))
        if "replay_history" in body:  # the legacy field (capability `replay-history`): routes/rollout.py
            return await start_turn_with_replay(self, request, principal, session_id, body, lease)
        if writes is not None and (key is not None or "records" in body or "status" in body):
            outcome = await run_in_threadpool(writes.start_turn, principal, session_id, body, lease, key)
            return self._written(outcome)
        if "records" in body or "status" in body:
            raise InvalidRequest("this server does not write a turn in one request (capability turn-write)")
        result = await run_in_threadpool(self.services.sessions.start_turn, principal, session_id, body, lease)
        return JSONResponse(result, status_code=201)

    async def append_records(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        turn_id = path_id(request, "turn_id")
        writes = self.services.turn_writes
        key = idempotency_key(request) if writes is not None else None
        lease = writer_lease(request)
        body = await self.body(request, "records-append.json")
        if writes is not None and key is not None:
            outcome = await run_in_threadpool(writes.append_records, principal, session_id, turn_id, body, lease, key)
            return self._written(outcome)
        result = await run_in_threadpool(
            self.services.sessions.append_records, principal, session_id, turn_id, body, lease
        )
        return JSONResponse(result, status_code=201)

    async def finish_turn(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        turn_id = path_id(request, "turn_id")
        writes = self.services.turn_writes
        key = idempotency_key(request) if writes is not None else None
        lease = writer_lease(request)
        body = await self.body(request, "turn-finish.json")
        if writes is not None and key is not None:
            outcome = await run_in_threadpool(writes.finish_turn, principal, session_id, turn_id, body, lease, key)
            return self._written(outcome)
        result = await run_in_threadpool(
            self.services.sessions.finish_turn, principal, session_id, turn_id, body, lease
        )
        return JSONResponse(result)
