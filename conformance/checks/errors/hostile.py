"""Deterministic hostile input: numbers at the edges of their ranges, strings JSON allows, odd parameters."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from conformance.checks import wire
from conformance.checks.errors.common import send_bytes, session_with_running_turn
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check


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


@check("ERR-NO-5XX-001", "ERR-PROBLEM-001", "ERR-MALFORMED-001", "XS-CURSOR-INVALID-001", "XS-PAGE-LIMIT-001",
       "FORK-IDEMPOTENT-KEY-001", "AUTH-REQUIRED-001", "SESS-CREATE-001",
       title="Non-ASCII, right-to-left, NUL, control and lone-surrogate values in every string parameter get the answer its rule names, never a 5xx")
def hostile_parameters(ctx: CheckContext) -> None:
    sid, turn_id, turn_path = session_with_running_turn(ctx)
    for weird in HOSTILE_PATH_IDS:  # a path id that cannot be an id: 404 wherever it stands
        for method, path in (("GET", f"/sessions/{weird}"), ("GET", f"/sessions/{weird}/transcript"),
                             ("GET", f"/sessions/{weird}/lineage"), ("POST", f"/sessions/{weird}/fork"),
                             ("POST", f"/sessions/{sid}/turns/{weird}/records"), ("POST", f"/sessions/{sid}/turns/{weird}/finish")):
            body = {"cut": {"mode": "latest"}} if path.endswith("fork") else (
                {"status": "completed"} if path.endswith("finish") else {"records": [{"type": "m", "content": {}}]})
            response = ctx.alice.request(method, path, json=body) if method == "POST" else ctx.alice.get(path)
            # No rule names the answer to an id no session can have beyond what every answer is held
            # to (the client validates each: no 5xx, a declared status, problem+json errors).
            ctx.expect(response.status < 500, f"{method} {path} answered {response.status}", "ERR-NO-5XX-001")
    for value in HOSTILE_QUERY:  # percent-encoded by hand: a lone surrogate has no UTF-8 of its own
        encoded = quote(value.encode("utf-8", "surrogatepass"), safe="")
        for kind in ("transcript", "records"):
            ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/{kind}?cursor={encoded}"), 400, "invalid-cursor", "XS-CURSOR-INVALID-001")
            ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/{kind}?limit={encoded}"), 422, "invalid-request", "XS-PAGE-LIMIT-001")
    for value in ("NaN", "Infinity", "1e1", "0x10", "5.0", "", "-0", "1,2"):
        ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/transcript", params={"limit": value}), 422, "invalid-request", "XS-PAGE-LIMIT-001")
    fork_body = {"cut": {"mode": "latest"}}
    for value in HOSTILE_HEADER_VALUES:  # obs-text: valid HTTP, so the API answers
        response = ctx.alice.post(f"/sessions/{sid}/fork", json=fork_body, headers={"Idempotency-Key": value})  # type: ignore[dict-item]
        ctx.expect_status(response, 400, "invalid-idempotency-key", "FORK-IDEMPOTENT-KEY-001")
        response = ctx.anonymous.get(f"/sessions/{sid}", headers={"Authorization": b"Bearer " + value})  # type: ignore[dict-item]
        ctx.expect_status(response, 401, "unauthenticated", "AUTH-REQUIRED-001")
    append_body = b'{"records": [{"type": "m", "content": {}}]}'
    for control in (b"a\x00b", b"a\x01b", b"a\x7fb"):  # not valid HTTP: sent raw
        for name, path, body in ((b"Idempotency-Key", f"/sessions/{sid}/fork", b'{"cut": {"mode": "latest"}}'),
                                 (b"Writer-Lease", f"{turn_path}/records", append_body)):
            headers = [(b"Content-Type", b"application/json"), (b"Content-Length", str(len(body)).encode()), (name, control)]
            answer, exchange = send_bytes(ctx, "POST", path, headers, body)
            # RFC 9110 lets a recipient reject the message, or replace a NUL with a space and keep
            # other controls, so any answer but a 5xx or a non-protocol error without problem+json holds.
            if not wire.acceptable_for_malformed(answer):
                raise CheckFailed(
                    f"POST {path} with {name.decode()}: {control!r} (a control character: not valid HTTP) answered "
                    f"{answer.status} {answer.content_type}: {answer.body[:120]!r}; expected no 5xx, and an error only as a "
                    "protocol-level rejection (400, 408, 413, 414, 431) or problem+json",
                    ["ERR-NO-5XX-001" if (answer.status or 0) >= 500 else "ERR-PROBLEM-001"],
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
            ctx.expect_status(ctx.alice.post(path, json=body), 422, "invalid-request", "ERR-MALFORMED-001")
    for text in ("a\u0000b", "\u0000"):  # free text holds no NUL
        ctx.expect_status(ctx.alice.post("/sessions", json={"name": text}), 422, "invalid-request", "ERR-MALFORMED-001")
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
    ctx.expect_status(ctx.alice.post("/sessions", content=utf8({"name": "\U0001F600" * 1025}), headers=json_type), 422, "invalid-request",
                      "ERR-MALFORMED-001")
    ctx.finish(sid, turn_id)
