"""Chapter: errors (problem details, malformed input, limits, no 5xx, schemas)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx

from conformance.checks import wire
from conformance.checks.leases import held_lease
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check
from conformance.results import Exchange


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
    # Content nested `levels` deep makes a body levels + 3 deep; only bodies within max_request_bytes
    # are sent, since a larger one is refused for its size first (ERR-PRECEDENCE-001).
    fits = (ctx.limits["max_request_bytes"] - 60) // 6
    for levels in sorted({254, 300, 1_000, min(5_000, fits)}):
        raw = b'{"records": [{"type": "message", "content": ' + b'{"d":' * levels + b"1" + b"}" * levels + b"}]}"
        response = ctx.alice.post(f"{turn_path}/records", content=raw, headers={"Content-Type": "application/json"})
        ctx.expect(response.status == 422, f"a body nested {levels + 3} levels deep answered {response.status}, expected 422")
        ctx.expect_status(response, 422, "invalid-request")
    # Arrays nest in 2 bytes a level, so a record 256 levels deep fits even max_record_bytes 1024:
    # root, records, record, content, then 252 arrays is exactly 256 levels (accepted); 253 is one too many.
    for arrays, status in ((253, 422), (252, 201)):
        raw = b'{"records": [{"type": "message", "content": {"d":' + b"[" * arrays + b"1" + b"]" * arrays + b"}}]}"
        response = ctx.alice.post(f"{turn_path}/records", content=raw, headers={"Content-Type": "application/json"})
        ctx.expect(
            response.status == status,
            f"a body nested {arrays + 4} levels deep answered {response.status}, expected {status}",
        )
        ctx.expect_status(response, status, None, "ERR-MALFORMED-001")
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
    for media in ("application/vnd.session+json", "application/json; charset=utf-8"):  # JSON by media type
        chosen = ctx.new_id("json")
        response = ctx.alice.post("/sessions", content=f'{{"session_id": "{chosen}"}}'.encode(), headers={"Content-Type": media})
        ctx.expect_status(response, 201)
    # Without a Content-Type a server MAY read the body as JSON or answer 415; either way consistently.
    untyped = ctx.new_id("untyped")
    response = ctx.alice.post("/sessions", content=f'{{"session_id": "{untyped}"}}'.encode())
    ctx.expect_status(response, (201, 415))
    if response.status == 415:
        ctx.expect_status(response, 415, "unsupported-media-type")
        ctx.expect(ctx.alice.get(f"/sessions/{untyped}").status == 404, "a body refused for its missing media type created a session")
    else:
        ctx.expect(response.json()["session_id"] == untyped, "a body without Content-Type was not read as the JSON it is")


def padded_body(fields: dict[str, Any], size: int) -> bytes:
    """A JSON body of exactly `size` bytes: the fields, then insignificant whitespace."""
    body = json.dumps(fields).encode()
    return body[:-1] + b" " * (size - len(body)) + b"}"


@check("ERR-SIZE-001", title="A body of max_request_bytes is accepted; one byte more is refused and changes nothing")
def oversize_body(ctx: CheckContext) -> None:
    largest = ctx.limits["max_request_bytes"]
    json_type = {"Content-Type": "application/json"}
    target = ctx.new_id("never")
    response = ctx.alice.post("/sessions", content=padded_body({"session_id": target}, largest + 1), headers=json_type)
    ctx.expect_status(response, 413, "payload-too-large")
    ctx.expect(ctx.alice.get(f"/sessions/{target}").status == 404, "an oversize body created a session")
    padding = "x" * (largest + 1)
    response = ctx.alice.post("/sessions", json={"session_id": target, "name": padding})
    ctx.expect_status(response, 413, "payload-too-large")
    ctx.expect(ctx.alice.get(f"/sessions/{target}").status == 404, "an oversize body created a session")
    response = ctx.alice.post("/sessions", content=padded_body({"session_id": target}, largest), headers=json_type)
    ctx.expect(
        response.status == 201,
        f"a body of exactly max_request_bytes ({largest} bytes) answered {response.status}; a body at the limit is accepted",
    )
    ctx.expect_status(response, 201)


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


def _raw(ctx: CheckContext, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b"",
         authorize: bool = True) -> tuple[wire.RawAnswer, Exchange]:
    """Send one request as exact bytes (alice's token first unless `authorize` is false)."""
    host = httpx.URL(ctx.config.target).netloc.decode()
    sent = ([(b"Authorization", f"Bearer {ctx.alice.token}".encode())] if authorize else []) + headers
    data = wire.request_bytes(method, path, host, sent, body)
    answer = wire.send_raw(ctx.config.target, data, ctx.config.timeout)
    exchange = wire.exchange_of(ctx.config.target, data, answer, ctx.alice.principal if authorize else None)
    ctx.alice.recorder.add(exchange)
    return answer, exchange


@check("ERR-PROTOCOL-001", "ERR-PROBLEM-001", title="Valid but odd HTTP reaches the API; only malformed HTTP may be refused outside problem+json")
def protocol_level_rejections(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    json_type = (b"Content-Type", b"application/json")
    fork_body = b'{"cut": {"mode": "latest"}}'
    length = (b"Content-Length", str(len(fork_body)).encode())
    # Valid HTTP/1.1, however odd: each must reach the API and get its ordinary answer.
    odd: list[tuple[str, str, str, list[tuple[bytes, bytes]], bytes, int]] = [
        ("a header named FALSE with the value [", "GET", f"/sessions/{sid}", [(b"FALSE", b"[")], b"", 200),
        ("an empty header value", "GET", f"/sessions/{sid}", [(b"X-Empty", b"")], b"", 200),
        ("obs-text in a header value", "GET", f"/sessions/{sid}", [(b"X-Obs-Text", b"caf\xe9 \xff")], b"", 200),
        ("a header name of every token character", "GET", f"/sessions/{sid}", [(b"X!#$%&'*+-.^_`|~09Az", b"v")], b"", 200),
        ("a repeated unknown header", "GET", f"/sessions/{sid}/transcript", [(b"X-Twice", b"1"), (b"X-Twice", b"2")], b"", 200),
        ("a header value with inner tabs", "GET", f"/sessions/{sid}/lineage", [(b"X-Tab", b"a\tb")], b"", 200),
        ("obs-text in Idempotency-Key", "POST", f"/sessions/{sid}/fork", [json_type, length, (b"Idempotency-Key", b"\xe9t\xe9")], fork_body, 400),
        ("an empty Idempotency-Key", "POST", f"/sessions/{sid}/fork", [json_type, length, (b"Idempotency-Key", b"")], fork_body, 400),
    ]
    for what, method, path, headers, body, status in odd:
        answer, exchange = _raw(ctx, method, path, headers, body)
        if answer.status != status or (status >= 400 and answer.content_type != "application/problem+json"):
            raise CheckFailed(
                f"{method} {path} with {what} (valid HTTP/1.1) answered {answer.status} "
                f"{answer.content_type or 'without a content type'}: {answer.body[:120]!r}; expected {status}"
                f"{' as problem+json' if status >= 400 else ''}: only requests that are not valid HTTP/1.1 may be "
                "refused before they reach the API",
                ["ERR-PROTOCOL-001"] + (["ERR-PROBLEM-001"] if status >= 400 and answer.status == status else []),
                exchange,
            )
    answer, exchange = _raw(ctx, "GET", f"/sessions/{sid}", [(b"Authorization", b"Bearer caf\xe9")], authorize=False)
    ctx.expect(
        answer.status == 401 and answer.content_type == "application/problem+json",
        f"GET /sessions/{sid} with obs-text in the bearer token answered {answer.status} {answer.content_type}; "
        "expected 401 problem+json",
    )
    # Not valid HTTP/1.1: a protocol-level rejection (400, 408, 413, 414, 431, any content type) or
    # a problem+json answer; never a 5xx, never another non-problem status.
    malformed: list[tuple[str, str, str, list[tuple[bytes, bytes]], bytes]] = [
        ("a header name with a space", "GET", f"/sessions/{sid}", [(b"Bad Name", b"x")], b""),
        ("a header name ending in ;", "GET", f"/sessions/{sid}/transcript", [(b"content-length;", b"0")], b""),
        ("a NUL byte in a header value", "GET", f"/sessions/{sid}", [(b"X-Nul", b"a\x00b")], b""),
        ("a Content-Length that is not a number", "POST", f"/sessions/{sid}/fork", [json_type, (b"Content-Length", b"abc")], fork_body),
        ("two different Content-Length headers", "POST", f"/sessions/{sid}/fork",
         [json_type, (b"Content-Length", str(len(fork_body)).encode()), (b"Content-Length", b"3")], fork_body),
        ("a space inside the request-target", "GET", f"/sessions/{sid} x", [], b""),
    ]
    for what, method, path, headers, body in malformed:
        answer, exchange = _raw(ctx, method, path, headers, body)
        if not wire.acceptable_for_malformed(answer):
            raise CheckFailed(
                f"{method} {path} with {what} (not valid HTTP/1.1) answered {answer.status} "
                f"{answer.content_type or 'without a content type'}: {answer.body[:120]!r}; a protocol-level "
                "rejection is 400, 408, 413, 414 or 431, and any other error answer is problem+json",
                ["ERR-PROTOCOL-001"] + (["ERR-NO-5XX-001"] if (answer.status or 0) >= 500 else []),
                exchange,
            )
    ctx.ok(ctx.alice.get(f"/sessions/{sid}/lineage"), 200)  # the server still answers


# ---------------------------------------------------------------- deterministic hostile input
# Numbers JSON allows and a double holds (so record content must accept them), at and past the
# edges where storage types and parsers break: 2^53, 2^63, 2^64 and beyond, the smallest
# subnormal, and the largest finite doubles.
HOSTILE_NUMBERS: list[str] = [
    "9007199254740992", "9007199254740993", "9223372036854775807", "9223372036854775808",
    "18446744073709551615", "18446744073709551616", "18446744073709551617", "-18446744073709551616",
    "-9223372036854775809", "340282366920938463463374607431768211457", "1" + "0" * 300,
    "5e-324", "-5e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "-1.7976931348623157e308",
    "1.7976931348623157E+308", "1e-400", "0.1e1", "-0", "-0.0", "1E2",
]
TOO_LARGE_NUMBERS = ["1e309", "-1e309", "1.8e308", "1" + "0" * 310]
# Strings JSON allows in record content: NUL and other controls as escapes, right-to-left and
# combining marks, astral characters, private use and non-characters.
HOSTILE_TEXT = [
    "a\u0000b", "\u0001\u001f\u007f\u0080\u009f", "\u202eright-to-left\u202c", "\u0645\u0631\u062d\u0628\u0627",
    "e\u0301\u0301\u0301", "\U0001F600\U0001F9D1\u200d\U0001F680", "\ue000\U0010FFFD", "\ufeff\ufffe\uffff",
    "\\", "\"", "</script>", "' OR 1=1 --", "%00", "\t\r\n", "\u2028\u2029",
]
# Values no string parameter can take: non-ASCII, right-to-left, NUL and controls, lone
# surrogates (as UTF-8 bytes and as percent escapes of them), and bytes that are not UTF-8.
HOSTILE_PATH_IDS = [
    "%C3%A9t%C3%A9", "%E2%80%AEevil", "%00", "a%00b", "%01", "%7F", "%ED%A0%80", "%FF%FE", "%F0%9F%98%80",
    "%D9%85%D8%B1", "a%2Fb", "a%20b", "%E2%80%8B",
]
HOSTILE_QUERY = ["\u00e9t\u00e9", "\u202eevil", "\u0000", "a\u0000b", "\u0001", "\ud800", "\U0001F600", " ", "\u0661\u0660"]
HOSTILE_HEADER_VALUES = [b"\xc3\xa9t\xc3\xa9", b"\xe2\x80\xaeevil", b"\xed\xa0\x80", b"\xff\xfe", b"\xf0\x9f\x98\x80", b"caf\xe9"]


@check("ERR-NO-5XX-001", "SESS-RECORD-APPEND-001", "ERR-MALFORMED-001",
       title="Numbers at the edges of integer and double ranges, and strings JSON allows, are stored and read back")
def hostile_content(ctx: CheckContext) -> None:
    sid, turn_id, turn_path = session_with_running_turn(ctx)
    json_type = {"Content-Type": "application/json"}
    for number in HOSTILE_NUMBERS:
        raw = b'{"records": [{"type": "message", "content": {"n": ' + number.encode() + b', "list": [' + number.encode() + b"]}}]}"
        response = ctx.alice.post(f"{turn_path}/records", content=raw, headers=json_type)
        ctx.expect(
            response.status == 201,
            f"a record whose content holds the number {number} (JSON allows it and a double holds it) answered "
            f"{response.status}: {response.content[:160]!r}; expected 201",
            "SESS-RECORD-APPEND-001",
        )
        stored = ctx.ok(response, 201)["records"][0]["content"]
        ctx.expect(
            isinstance(stored["n"], (int, float)) and float(stored["n"]) == float(number),
            f"the number {number} was stored as {stored['n']!r}", "SESS-RECORD-APPEND-001",
        )
    for number in TOO_LARGE_NUMBERS:
        raw = b'{"records": [{"type": "message", "content": {"n": ' + number.encode() + b"}}]}"
        ctx.expect_status(ctx.alice.post(f"{turn_path}/records", content=raw, headers=json_type), 400, "malformed-json",
                          "ERR-MALFORMED-001")
    texts = {f"t{n}": text for n, text in enumerate(HOSTILE_TEXT)}
    response = ctx.alice.post(f"{turn_path}/records", json={"records": [{"type": "message", "content": texts}]})
    ctx.expect(response.status == 201, f"a record of unusual strings answered {response.status}: {response.content[:160]!r}",
               "SESS-RECORD-APPEND-001")
    ctx.expect(ctx.ok(response, 201)["records"][0]["content"] == texts, "the unusual strings came back changed",
               "SESS-RECORD-APPEND-001")
    ctx.finish(sid, turn_id)
    walked = ctx.walk(sid)  # every hostile record read back, through the transcript
    ctx.expect(len(walked) == 2 + len(HOSTILE_NUMBERS) + 1, f"the transcript holds {len(walked)} records",
               "SESS-RECORD-APPEND-001")
    ctx.expect(walked[-1]["content"] == texts, "the unusual strings read back changed", "SESS-RECORD-APPEND-001")


@check("ERR-NO-5XX-001", "ERR-PROBLEM-001",
       title="Non-ASCII, right-to-left, NUL, control and lone-surrogate values in every string parameter get 4xx problems")
def hostile_parameters(ctx: CheckContext) -> None:
    sid, turn_id, turn_path = session_with_running_turn(ctx)
    for weird in HOSTILE_PATH_IDS:  # a path id that cannot be an id: 404 wherever it stands
        for method, path in (("GET", f"/sessions/{weird}"), ("GET", f"/sessions/{weird}/transcript"),
                             ("GET", f"/sessions/{weird}/lineage"), ("POST", f"/sessions/{weird}/fork"),
                             ("POST", f"/sessions/{sid}/turns/{weird}/records"), ("POST", f"/sessions/{sid}/turns/{weird}/finish")):
            body = {"cut": {"mode": "latest"}} if path.endswith("fork") else (
                {"status": "completed"} if path.endswith("finish") else {"records": [{"type": "m", "content": {}}]})
            response = ctx.alice.request(method, path, json=body) if method == "POST" else ctx.alice.get(path)
            ctx.expect_status(response, (400, 404), None, "ERR-NO-5XX-001")
    for value in HOSTILE_QUERY:  # percent-encoded by hand: a lone surrogate has no UTF-8 of its own
        encoded = quote(value.encode("utf-8", "surrogatepass"), safe="")
        for kind in ("transcript", "records"):
            ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/{kind}?cursor={encoded}"), 400, "invalid-cursor")
            ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/{kind}?limit={encoded}"), 422, "invalid-request")
    for value in ("NaN", "Infinity", "1e1", "0x10", "5.0", "", "-0", "1,2"):
        ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/transcript", params={"limit": value}), 422, "invalid-request")
    fork_body = {"cut": {"mode": "latest"}}
    for value in HOSTILE_HEADER_VALUES:  # obs-text: valid HTTP, so the API answers
        response = ctx.alice.post(f"/sessions/{sid}/fork", json=fork_body, headers={"Idempotency-Key": value})  # type: ignore[dict-item]
        ctx.expect_status(response, 400, "invalid-idempotency-key")
        response = ctx.anonymous.get(f"/sessions/{sid}", headers={"Authorization": b"Bearer " + value})  # type: ignore[dict-item]
        ctx.expect_status(response, 401, "unauthenticated")
        if ctx.has("writer-lease"):
            response = ctx.alice.post(f"{turn_path}/records", json={"records": [{"type": "m", "content": {}}]},
                                      headers={"Writer-Lease": value})  # type: ignore[dict-item]
            ctx.expect_status(response, 422, "invalid-request")
    append_body = b'{"records": [{"type": "m", "content": {}}]}'
    for control in (b"a\x00b", b"a\x01b", b"a\x7fb"):  # not valid HTTP: sent raw
        for name, path, body in ((b"Idempotency-Key", f"/sessions/{sid}/fork", b'{"cut": {"mode": "latest"}}'),
                                 (b"Writer-Lease", f"{turn_path}/records", append_body)):
            headers = [(b"Content-Type", b"application/json"), (b"Content-Length", str(len(body)).encode()), (name, control)]
            answer, exchange = _raw(ctx, "POST", path, headers, body)
            if not wire.acceptable_for_malformed(answer) or answer.status in (200, 201):
                raise CheckFailed(
                    f"POST {path} with {name.decode()}: {control!r} (a control character: not valid HTTP) answered "
                    f"{answer.status} {answer.content_type}: {answer.body[:120]!r}; expected a protocol-level "
                    "rejection (400, 408, 413, 414, 431) or a problem+json refusal of the header",
                    ["ERR-NO-5XX-001" if (answer.status or 0) >= 500 else "ERR-PROTOCOL-001"],
                    exchange,
                )
    bad_ids: list[Any] = ["\u00e9t\u00e9", "\u202eevil", "a\u0000b", "\U0001F600", "a\u0001", "", "x" * 129, 7, None, [], {}]
    for bad in bad_ids:
        cases = [
            ("/sessions", {"session_id": bad}),
            (f"/sessions/{sid}/fork", {"cut": {"mode": "latest"}, "target_session_id": bad}),
            (f"/sessions/{sid}/fork", {"cut": {"mode": "through", "turn_id": bad}}),
            (f"/sessions/{sid}/turns", {"role": "user", "turn_id": bad}),
            (f"/sessions/{sid}/turns", {"role": bad}),
            (f"{turn_path}/finish", {"status": bad}),
            (f"{turn_path}/records", {"records": [{"type": bad, "content": {}}]}),
        ]
        if ctx.has("writer-lease"):
            cases.append((f"/sessions/{sid}/lease", {"ttl_seconds": 1, "lease_id": bad}))
        for path, body in cases:
            ctx.expect_status(ctx.alice.post(path, json=body), 422, "invalid-request")
    for text in ("a\u0000b", "\u0000"):  # free text holds no NUL
        ctx.expect_status(ctx.alice.post("/sessions", json={"name": text}), 422, "invalid-request")
    json_type = {"Content-Type": "application/json"}
    for raw in (b'{"name": "\\ud800"}', b'{"name": "\\udfff\\ud800"}', b'{"description": "a\\ud83d"}', b'{"name": "\xed\xa0\x80"}',
                b'{"name": "\xff"}', b'{"name": "\xc3"}'):
        ctx.expect_status(ctx.alice.post("/sessions", content=raw, headers=json_type), 400, "malformed-json", "ERR-MALFORMED-001")
    def utf8(body: dict[str, Any]) -> bytes:  # raw UTF-8, not \u escapes: 1024 characters fit max_request_bytes
        return json.dumps(body, ensure_ascii=False).encode()

    for text in ("\U0001F600" * 1024, "\u202e" + "\u0645" * 1023, "e\u0301" * 512):  # 1024 characters: the limit
        response = ctx.alice.post("/sessions", content=utf8({"name": text, "description": text}), headers=json_type)
        created = ctx.ok(response, 201, "SESS-CREATE-001")
        ctx.expect(created["name"] == text and created["description"] == text,
                   f"a name of 1024 characters ({text[:2]!r}...) came back changed", "SESS-CREATE-001")
        read = ctx.ok(ctx.alice.get(f"/sessions/{created['session_id']}"), 200, "SESS-CREATE-001")
        ctx.expect(read["name"] == text, "a name of 1024 characters was stored changed", "SESS-CREATE-001")
    ctx.expect_status(ctx.alice.post("/sessions", content=utf8({"name": "\U0001F600" * 1025}), headers=json_type), 422, "invalid-request")
    ctx.finish(sid, turn_id)
