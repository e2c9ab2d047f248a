"""Chapter: errors (problem details, malformed input, limits, no 5xx, schemas)."""

from __future__ import annotations

from typing import Any

from conformance.context import CheckContext
from conformance.registry import check


def session_with_running_turn(ctx: CheckContext) -> tuple[str, str, str]:
    """A session with one finished and one running turn: every write endpoint has a target."""
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    turn = ctx.start_turn(sid)
    return sid, turn["turn_id"], f"/sessions/{sid}/turns/{turn['turn_id']}"


@check("ERR-MALFORMED-001", title="Malformed or mistyped bodies are refused and change nothing")
def malformed_bodies(ctx: CheckContext) -> None:
    sid, turn_id, turn_path = session_with_running_turn(ctx)
    before = ctx.walk(sid, "records")
    target = ctx.new_id("never")
    paths = ["/sessions", f"/sessions/{sid}/turns", f"{turn_path}/records", f"{turn_path}/finish", f"/sessions/{sid}/fork"]
    for path in paths:
        for raw in (b"{", b'{"cut": ', b"\xff\xfe", b"", b"NaN", b'{"a": 1}}'):
            response = ctx.alice.post(path, content=raw, headers={"Content-Type": "application/json"})
            ctx.expect_status(response, 400, "malformed-json")
    mistyped: list[tuple[str, Any]] = [
        ("/sessions", []),
        ("/sessions", {"session_id": target, "name": 5}),
        ("/sessions", {"session_id": target, "unknown": True}),
        (f"/sessions/{sid}/turns", {"role": "robot"}),
        (f"{turn_path}/records", {"records": []}),
        (f"{turn_path}/records", {"records": [{"type": "message", "content": "text"}]}),
        (f"{turn_path}/finish", {"status": "paused"}),
        (f"/sessions/{sid}/fork", {"cut": {"mode": "through"}, "target_session_id": target}),
        (f"/sessions/{sid}/fork", {"cut": {"mode": "latest", "turn_id": turn_id}, "target_session_id": target}),
        (f"/sessions/{sid}/fork", {"cut": {"mode": "sideways"}, "target_session_id": target}),
        (f"/sessions/{sid}/fork", {"cut": {"mode": "latest"}, "target_session_id": 7}),
        (f"/sessions/{sid}/fork", {"cut": {"mode": "latest"}, "header": {"name": 1}, "target_session_id": target}),
    ]
    too_deep: Any = {}
    for _ in range(300):
        too_deep = {"d": too_deep}
    mistyped.append((f"{turn_path}/records", {"records": [{"type": "message", "content": too_deep}]}))
    for path, body in mistyped:
        response = ctx.alice.post(path, json=body)
        ctx.expect_status(response, 422, "invalid-request")
    for raw in (b'{"name": "\\udad9"}', b'{"records": [{"type": "m", "content": {"\\ud800": 1}}]}',
                b'{"records": [{"type": "m", "content": {"n": 1e999}}]}'):
        for path in ("/sessions", f"{turn_path}/records"):
            response = ctx.alice.post(path, content=raw, headers={"Content-Type": "application/json"})
            ctx.expect_status(response, 400, "malformed-json")
    ctx.expect(ctx.walk(sid, "records") == before, "refused bodies changed the session's records")
    ctx.expect(ctx.alice.get(f"/sessions/{target}").status == 404, "a refused body created a session")
    ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/transcript"), 200)
    ctx.finish(sid, turn_id)


@check("ERR-MEDIA-001", title="Bodies that are not JSON by media type are refused with 415")
def media_type(ctx: CheckContext) -> None:
    target = ctx.new_id("never")
    response = ctx.alice.post(
        "/sessions",
        content=f'{{"session_id": "{target}"}}'.encode(),
        headers={"Content-Type": "text/plain"},
    )
    ctx.expect_status(response, 415, "unsupported-media-type")
    ctx.expect(ctx.alice.get(f"/sessions/{target}").status == 404, "a refused body created a session")


@check("ERR-SIZE-001", title="Bodies above max_request_bytes are refused and change nothing")
def oversize_body(ctx: CheckContext) -> None:
    target = ctx.new_id("never")
    padding = "x" * (ctx.limits["max_request_bytes"] + 1)
    response = ctx.alice.post("/sessions", json={"session_id": target, "name": padding})
    ctx.expect_status(response, 413, "payload-too-large")
    ctx.expect(ctx.alice.get(f"/sessions/{target}").status == 404, "an oversize body created a session")


@check("ERR-PROBLEM-001", "ERR-TYPE-001", title="Errors are problem documents with the assigned type and status")
def problem_documents(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    cases = [
        (ctx.alice.get(f"/sessions/{ctx.new_id('missing')}"), 404, "not-found"),
        (ctx.alice.get("/no/such/route"), 404, "not-found"),
        (ctx.alice.request("DELETE", f"/sessions/{sid}"), 405, "method-not-allowed"),
        (ctx.alice.post("/sessions", json={"session_id": sid}), 409, "session-exists"),
        (ctx.anonymous.get(f"/sessions/{sid}"), 401, "unauthenticated"),
        (ctx.alice.get(f"/sessions/{sid}/transcript", params={"cursor": "%%%"}), 400, "invalid-cursor"),
    ]
    for response, status, kind in cases:
        ctx.expect_status(response, status, kind)
        body = response.json()
        ctx.expect(bool(body.get("title")), f"{kind}: a problem needs a title", "ERR-PROBLEM-001")


@check("ERR-NO-5XX-001", title="Hostile paths, queries, headers and bodies never cause a 5xx")
def hostile_input(ctx: CheckContext) -> None:
    sid, turn_id, turn_path = session_with_running_turn(ctx)
    deep = b"[" * 20_000 + b"]" * 20_000
    nested = b'{"cut": ' + b'{"a": ' * 5_000 + b"1" + b"}" * 5_000 + b"}"
    bodies = [deep, nested, b'{"cut": {"mode": "latest"}, "cut": {"mode": "latest"}}', b'{"session_id": "\\u0000"}',
              b'{"name": "a\\u0000b"}', b'{"description": "\\udad9\\ud800"}', b'{"cut": {"mode": "latest"}, "header": {"name": "\\u0000"}}',
              b'{"n": 1e999}', b'{"records": [{"type": "m", "content": {"x": -0.0}}]}', "\"\U0001F600\"".encode()]
    for path in ("/sessions", f"/sessions/{sid}/fork", f"{turn_path}/records"):
        for body in bodies:
            ctx.alice.post(path, content=body, headers={"Content-Type": "application/json"})
    strange_ids = ["%00", "..%2F..%2Fetc", "a" * 5000, "%F0%9F%98%80", "'%20OR%201=1--", "%E2%80%AE"]
    for weird in strange_ids:
        ctx.alice.get(f"/sessions/{weird}")
        ctx.alice.get(f"/sessions/{weird}/transcript")
        ctx.alice.post(f"/sessions/{weird}/fork", json={"cut": {"mode": "latest"}})
        ctx.alice.post(f"/sessions/{sid}/turns/{weird}/records", json={"records": [{"type": "m", "content": {}}]})
    for params in ({"limit": "-1"}, {"limit": "1e3"}, {"limit": "9" * 40}, {"cursor": "x" * 10_000}, {"limit": ""}):
        ctx.alice.get(f"/sessions/{sid}/transcript", params=params)
    for headers in ({"Idempotency-Key": '"\\q"'}, {"Idempotency-Key": "a,b"}, {"Content-Type": "application/json; charset=latin-1"}):
        ctx.alice.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}, headers=headers)
    ctx.finish(sid, turn_id)


@check("ERR-SCHEMA-001", title="Every operation's answers match the declared schemas")
def every_operation_matches_schema(ctx: CheckContext) -> None:
    # The client validates each response; this check makes sure every operation is exercised.
    source, turns, _ = ctx.conversation(2)
    sid = source["session_id"]
    child = ctx.fork_ok(sid, {"mode": "through", "turn_id": turns[0]["turn_id"]}, header={"name": None})
    cid = child["session"]["session_id"]
    turn = ctx.start_turn(cid, "assistant")
    ctx.append(cid, turn["turn_id"], 2)
    ctx.finish(cid, turn["turn_id"], "failed")
    for path in (f"/sessions/{cid}", f"/sessions/{cid}/lineage", "/capabilities"):
        ctx.expect_status(ctx.alice.get(path), 200)
    for kind in ("transcript", "records"):
        ctx.walk(cid, kind, limit=1)
