"""What errors answer: problem documents, routes, precedence and declared schemas, never a 5xx."""

from __future__ import annotations

from conformance.checks.errors.common import session_with_running_turn
from conformance.checks.leases import held_lease
from conformance.context import CheckContext
from conformance.errors import NotVerified
from conformance.registry import check
from conformance.response import describe


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
    # Which status each situation gets is its own rule's (ERR-ROUTE-001, SESS-ID-CONFLICT-001, ...);
    # this check judges the problem documents: every error is one (the client validates each answer's
    # media type, members and status), with a title, and the kind's type where the status is the kind's.
    judged = 0
    for response, status, kind in cases:
        if response.status < 400:
            continue
        ctx.expect(bool(response.json().get("title")), f"{describe(response.exchange)}: a problem needs a title", "ERR-PROBLEM-001")
        if response.status == status:
            ctx.expect(response.problem_type == f"urn:session-lineage:problem:{kind}",
                       f"{describe(response.exchange)}: type {response.problem_type}, expected {kind}", "ERR-TYPE-001")
            judged += 1
    if not judged:
        raise NotVerified("no situation got the status of its error kind, so no problem type could be judged against its kind")


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
        lease_id = held_lease(ctx, sid)["lease_id"]
        second_turn = ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"})  # a turn is running, too
        ctx.expect(
            second_turn.status == 409 and second_turn.problem_type == "urn:session-lineage:problem:writer-conflict",
            f"a write without the held lease to a session with a running turn answered {second_turn.status} "
            f"{second_turn.problem_type}, expected 409 writer-conflict",
        )
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


@check("ERR-REFUSAL-TYPE-001", title="Refusals that match the schema (limits, rules) carry their own problem type and give the range")
def refusals_say_what_they_are(ctx: CheckContext) -> None:
    largest = ctx.limits["max_page_size"]
    sid = ctx.create_session()["session_id"]
    refusals = []  # (response, kind, the number the detail must name as the range's upper end)
    for path in (f"/sessions/{sid}/transcript", f"/sessions/{sid}/records"):
        for limit in (largest + 1, 174516736671):  # integers of at least 1: the schema's own
            refusals.append((ctx.alice.get(path, params={"limit": limit}), "page-size-exceeded", largest))
    if ctx.has("writer-lease"):
        longest = ctx.limits["max_lease_seconds"]
        answer = ctx.alice.post(f"/sessions/{sid}/lease", json={"ttl_seconds": longest + 1})
        refusals.append((answer, "lease-too-long", longest))
    if ctx.has("sharing"):
        owner = ctx.principal_id(ctx.alice)
        answer = ctx.alice.request("PUT", f"/sessions/{sid}/grants/{owner}", json={"role": "reader"})
        refusals.append((answer, "grant-to-owner", None))
    for response, kind, upper in refusals:
        ctx.expect_status(response, 422, kind)
        detail = str(response.json().get("detail", ""))
        if upper is not None:
            ctx.expect(
                str(upper) in detail,
                f"{response.exchange.method} {response.exchange.url}: the detail {detail!r} does not give "
                f"the accepted range (1 to {upper})",
            )
