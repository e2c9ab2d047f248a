"""Routes and HTTP rules of the rollout chapter: `Requires-Capabilities` (NEGOTIATE-HEADER-001),
turn starts carrying the legacy `replay_history` (with the deprecation headers of
COMPAT-DEPRECATION-001), fields of capabilities the server runs without, and the pending rewind
action (`GET /sessions/{id}/pending-action`)."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import spec
from reference_impl.errors import CapabilityMissing, DomainError, InvalidRequest
from reference_impl.http.base import Handlers
from reference_impl.http.problems import problem
from reference_impl.http.requests import path_id
from reference_impl.http.threads import run_in_threadpool
from reference_impl.services import Services
from reference_impl.services.rollout import deprecation_headers

REQUIRES_HEADER = b"requires-capabilities"
_NAME = re.compile(r"^[a-z][a-z0-9.-]*$")


def required_capabilities(request: Request) -> list[str]:
    """The names `Requires-Capabilities` lists (several header fields combine, RFC 9110 5.3)."""
    values = [value.decode("latin-1") for key, value in request.scope.get("headers", []) if key == REQUIRES_HEADER]
    combined = ",".join(values)
    if not combined.strip(" \t"):
        return []  # absent or empty: the request relies on nothing beyond the operation
    names = [item.strip(" \t") for item in combined.split(",") if item.strip(" \t")]  # empty elements: ignored
    # A name that is not even a capability name is one the server lacks (it never guesses).
    return list(dict.fromkeys(name if _NAME.match(name) else name.encode("unicode_escape").decode("ascii")[:80] for name in names))


def advertised(services: Services) -> list[str]:
    return list(services.capabilities.capabilities(spec.spec_version())["capabilities"])


def check_required(request: Request, services: Services) -> None:
    """412 `capability-missing` when the server lacks a capability the request relies on."""
    wanted = required_capabilities(request)
    if not wanted:
        return
    have = set(advertised(services))
    missing = [name for name in wanted if name not in have]
    if missing:
        raise CapabilityMissing(
            f"this server lacks {', '.join(missing)}, which the request relies on (Requires-Capabilities)", missing
        )


def refuse_fields_of_missing_capabilities(services: Services, body: dict[str, Any], fields: dict[str, str]) -> None:
    """A member of a capability the server runs without is an unknown member (VERSION-UNKNOWN-FIELD-001)."""
    have = set(advertised(services))
    for field, capability in fields.items():
        if field in body and capability not in have:
            raise InvalidRequest(f"/: unknown field {field}")


async def start_turn_with_replay(
    handlers: Handlers, request: Request, principal: Any, session_id: str, body: dict[str, Any], lease: str | None
) -> Response:
    """A turn start carrying `replay_history`: compare or rebuild, then start the turn; a lineage
    server announces the field's deprecation on every 201 and 409 answer."""
    services = handlers.services
    refuse_fields_of_missing_capabilities(services, body, {"replay_history": "replay-history"})
    assert services.replay is not None
    combined = [name for name in ("records", "status") if name in body]
    if combined:  # never drop a member: the one-request turn write does not take replay history
        raise InvalidRequest(f"/: replay_history cannot be combined with {', '.join(combined)} (turn-write) in one request")
    headers = deprecation_headers() if "lineage" in advertised(services) else {}
    replay = body["replay_history"]
    rest = {key: value for key, value in body.items() if key != "replay_history"}
    try:
        plan = await run_in_threadpool(services.replay.plan, principal, session_id, replay, lease)
        result = await run_in_threadpool(
            services.sessions.start_turn, principal, session_id, rest, lease, prefix=plan.prefix
        )
    except DomainError as exc:
        if not _is_409(exc.kind):
            raise
        from reference_impl.http.app import public_text  # the app module imports the routes

        return problem(exc.kind, public_text(request, exc.detail), headers=headers)
    return JSONResponse(result, status_code=201, headers=headers)


def _is_409(kind: str) -> bool:
    entry = spec.load_yaml(spec.PROBLEM_TYPES_PATH)["types"].get(kind, {})
    return entry.get("status") == 409


class RolloutHandlers(Handlers):
    chapter = "rewind"

    def routes(self) -> list[Route]:
        return [Route("/sessions/{session_id}/pending-action", self.pending_action, methods=["GET"])]

    async def pending_action(self, request: Request) -> Response:
        principal = self.principal(request)
        session_id = path_id(request, "session_id")
        assert self.services.rewind is not None
        return JSONResponse(await self.read(self.services.rewind.pending_action, principal, session_id))
