"""Routes of the fork chapter."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reference_impl.http.base import Handlers
from reference_impl.http.routes.rollout import refuse_fields_of_missing_capabilities
from reference_impl.http.requests import idempotency_key, path_id, scope_ids
from reference_impl.http.threads import run_in_threadpool


class ForkHandlers(Handlers):
    chapter = "fork"

    def routes(self) -> list[Route]:
        return [Route("/sessions/{session_id}/fork", self.fork, methods=["POST"])]

    async def fork(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        key = idempotency_key(request)
        body = scope_ids(
            principal, await self.body(request, "fork-request.json"), ("target_session_id",), ("cut", "turn_id")
        )
        refuse_fields_of_missing_capabilities(self.services, body, {"rewind": "rewind"})
        outcome = await run_in_threadpool(self.services.fork.fork, principal, session_id, body, key)
        return JSONResponse(
            outcome.body,
            status_code=outcome.status,
            headers={"Idempotency-Replayed": "true" if outcome.replayed else "false"},
        )
