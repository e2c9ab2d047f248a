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
    for path, body in mistyped:
        response = ctx.alice.post(path, json=body)
        ctx.expect_status(response, 422, "invalid-request")
    for levels in (254, 300, 1_000, 5_000):  # content nested `levels` deep: the body is levels + 3 deep
        raw = b'{"records": [{"type": "message", "content": ' + b'{"d": ' * levels + b"1" + b"}" * levels + b"}]}"
        response = ctx.alice.post(f"{turn_path}/records", content=raw, headers={"Content-Type": "application/json"})
        ctx.expect(response.status == 422, f"a body nested {levels + 3} levels deep answered {response.status}, expected 422")
        ctx.expect_status(response, 422, "invalid-request")
    at_limit = b'{"records": [{"type": "message", "content": ' + b'{"d": ' * 253 + b"1" + b"}" * 253 + b"}]}"
    response = ctx.alice.post(f"{turn_path}/records", content=at_limit, headers={"Content-Type": "application/json"})
    ctx.expect_status(response, 201, None, "ERR-MALFORMED-001")  # exactly 256 levels: accepted
    before = ctx.walk(sid, "records")
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
        (ctx.alice.request("PUT", f"/sessions/{sid}/transcript"), 405, "method-not-allowed"),
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


@check("ERR-ROUTE-001", title="Paths name operations exactly: no redirects, 404 and 405 as problems")
def routes(ctx: CheckContext) -> None:
    sid, turn_id, turn_path = session_with_running_turn(ctx)
    unknown = [
        ("GET", "/sessions/"),
        ("GET", f"/sessions/{sid}/"),
        ("GET", f"/sessions/{sid}/transcript/"),
        ("GET", "/capabilities/"),
        ("POST", f"/sessions/{sid}/turns/"),
        ("POST", f"/sessions/{sid}/fork/"),
        ("GET", f"/sessions/{sid}/no-such-resource"),
        ("GET", "/no/such/route"),
    ]
    for method, path in unknown:
        response = ctx.alice.post(path, json={"cut": {"mode": "latest"}}) if method == "POST" else ctx.alice.get(path)
        ctx.expect(
            response.status == 404,
            f"{method} {path} answered {response.status}"
            + (f" to {response.header('location')}" if response.header("location") else "")
            + "; a path naming no operation answers 404, never a redirect",
        )
        ctx.expect_status(response, 404, "not-found")
    for method, path in (("PUT", "/sessions"), ("DELETE", f"{turn_path}/finish"), ("PATCH", f"/sessions/{sid}/transcript")):
        response = ctx.alice.request(method, path, json={})
        ctx.expect_status(response, 405, "method-not-allowed")
        ctx.expect(bool(response.header("allow")), f"{method} {path}: a 405 must list the allowed methods in Allow")
    ctx.expect_status(ctx.alice.get(f"/sessions/{sid}"), 200)  # and the exact path still works
    ctx.finish(sid, turn_id)


@check("ERR-PRECEDENCE-001", title="When several errors apply, the first in the precedence table answers")
def error_precedence(ctx: CheckContext) -> None:
    sid, turn_id, turn_path = session_with_running_turn(ctx)
    missing = ctx.new_id("missing")
    json_type = {"Content-Type": "application/json"}
    oversize = b'{"name": "' + b"x" * (ctx.limits["max_request_bytes"] + 1) + b'"}'
    cases = [
        ("credentials before the body", ctx.anonymous.post("/sessions", content=b"{", headers=json_type), 401, "unauthenticated"),
        ("credentials before the session", ctx.anonymous.get(f"/sessions/{missing}"), 401, "unauthenticated"),
        ("media type before size", ctx.alice.post("/sessions", content=oversize, headers={"Content-Type": "text/plain"}), 415, "unsupported-media-type"),
        ("size before syntax", ctx.alice.post("/sessions", content=oversize[:-2], headers=json_type), 413, "payload-too-large"),
        ("syntax before the schema", ctx.alice.post(f"/sessions/{sid}/turns", content=b'{"role": ', headers=json_type), 400, "malformed-json"),
        ("request headers before the body", ctx.alice.post(f"/sessions/{sid}/fork", content=b"{", headers={**json_type, "Idempotency-Key": '"a"b"'}), 400, "invalid-idempotency-key"),
        ("the body before the session", ctx.alice.post(f"/sessions/{missing}/turns", content=b"{", headers=json_type), 400, "malformed-json"),
        ("the schema before the session", ctx.alice.post(f"/sessions/{missing}/turns", json={"role": "robot"}), 422, "invalid-request"),
        ("the session before the operation's rules", ctx.alice.post(f"/sessions/{missing}/fork", json={"cut": {"mode": "through", "turn_id": ctx.new_id("t")}}), 404, "not-found"),
        ("the session before the turn", ctx.bob.post(f"{turn_path}/finish", json={"status": "completed"}), 404, "not-found"),
    ]
    for what, response, status, kind in cases:
        ctx.expect(
            response.status == status and response.problem_type == f"urn:session-lineage:problem:{kind}",
            f"{what}: {response.exchange.method} {response.exchange.url} answered {response.status} "
            f"{response.problem_type}, expected {status} {kind}",
        )
    if ctx.has("writer-lease"):  # the writer lease before the operation's own rules
        lease = ctx.alice.post(f"/sessions/{sid}/lease", json={"ttl_seconds": min(60, ctx.limits.get("max_lease_seconds", 60))})
        ctx.expect_status(lease, 201, None, "LEASE-ACQUIRE-001")
        second_turn = ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"})  # a turn is running, too
        ctx.expect(
            second_turn.status == 409 and second_turn.problem_type == "urn:session-lineage:problem:writer-conflict",
            f"a write without the held lease to a session with a running turn answered {second_turn.status} "
            f"{second_turn.problem_type}, expected 409 writer-conflict",
        )
        lease_id = lease.json()["lease_id"]
        ctx.alice.request("DELETE", f"/sessions/{sid}/lease", headers={"Writer-Lease": lease_id})
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
