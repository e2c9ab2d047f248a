"""Request bodies: malformed, mistyped, too deep, of the wrong media type or too large."""

from __future__ import annotations

import json
from typing import Any

from conformance.checks.errors.common import session_with_running_turn
from conformance.context import CheckContext
from conformance.registry import check


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
