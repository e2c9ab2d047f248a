"""Chapter: authorization (credentials, invisible sessions)."""

from __future__ import annotations

from typing import Any

from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.registry import check


def _every_operation(client: ApiClient, sid: str, turn_id: str) -> list[Response]:
    record: dict[str, Any] = {"records": [{"type": "message", "content": {}}]}
    return [
        client.get(f"/sessions/{sid}"),
        client.get(f"/sessions/{sid}/transcript"),
        client.get(f"/sessions/{sid}/records"),
        client.get(f"/sessions/{sid}/lineage"),
        client.post(f"/sessions/{sid}/turns", json={"role": "user"}),
        client.post(f"/sessions/{sid}/turns/{turn_id}/records", json=record),
        client.post(f"/sessions/{sid}/turns/{turn_id}/finish", json={"status": "completed"}),
        client.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}),
    ]


@check("AUTH-REQUIRED-001", title="Every operation but discovery needs a known bearer token")
def credentials_required(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    turn = ctx.start_turn(sid)
    for response in _every_operation(ctx.anonymous, sid, turn["turn_id"]):
        ctx.expect_status(response, 401, "unauthenticated")
    response = ctx.anonymous.post("/sessions", json={})
    ctx.expect_status(response, 401, "unauthenticated")
    for header in ("Bearer unknown-token-" + ctx.new_id("t"), "Basic YWxpY2U6c2VjcmV0", "Bearer", "Token abc"):
        response = ctx.anonymous.get(f"/sessions/{sid}", headers={"Authorization": header})
        ctx.expect_status(response, 401, "unauthenticated")
    alice, bob = (f"Bearer {client.token}" for client in (ctx.alice, ctx.bob))
    for pair in ((alice, bob), (alice, alice), (bob, alice)):  # which would count? neither
        response = ctx.anonymous.get(f"/sessions/{sid}", repeated_headers=[("Authorization", value) for value in pair])
        ctx.expect(response.status == 401, f"two Authorization headers answered {response.status}, expected 401")
        ctx.expect_status(response, 401, "unauthenticated")


@check("AUTH-HIDE-001", title="Another principal's session answers exactly like a missing one")
def invisible_sessions(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(2)
    sid = source["session_id"]
    turn = ctx.start_turn(sid)
    hidden = _every_operation(ctx.bob, sid, turn["turn_id"])
    missing = _every_operation(ctx.bob, ctx.new_id("missing"), turn["turn_id"])
    for seen, absent in zip(hidden, missing):
        ctx.expect_status(seen, 404, "not-found")
        ctx.expect(
            (seen.status, seen.problem_type) == (absent.status, absent.problem_type),
            f"{seen.exchange.method} {seen.exchange.url}: answers differ for hidden and missing sessions",
        )
    ctx.finish(sid, turn["turn_id"])
    ctx.expect(ctx.walk(sid, "records") == records, "bob's refused requests changed alice's session")
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    ctx.expect_status(ctx.bob.get(f"/sessions/{child}/transcript"), 404, "not-found")
    ctx.expect_status(ctx.alice.get(f"/sessions/{child}/transcript"), 200)
