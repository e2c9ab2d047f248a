"""HTTP at the protocol level: odd but valid requests reach the API, malformed ones may be refused."""

from __future__ import annotations

from conformance.checks import wire
from conformance.checks.errors.common import send_bytes
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check


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
        answer, exchange = send_bytes(ctx, method, path, headers, body)
        if answer.status != status or (status >= 400 and answer.content_type != "application/problem+json"):
            raise CheckFailed(
                f"{method} {path} with {what} (valid HTTP/1.1) answered {answer.status} "
                f"{answer.content_type or 'without a content type'}: {answer.body[:120]!r}; expected {status}"
                f"{' as problem+json' if status >= 400 else ''}: only requests that are not valid HTTP/1.1 may be "
                "refused before they reach the API",
                ["ERR-PROTOCOL-001"] + (["ERR-PROBLEM-001"] if status >= 400 and answer.status == status else []),
                exchange,
            )
    answer, exchange = send_bytes(ctx, "GET", f"/sessions/{sid}", [(b"Authorization", b"Bearer caf\xe9")], authorize=False)
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
        answer, exchange = send_bytes(ctx, method, path, headers, body)
        if not wire.acceptable_for_malformed(answer):
            raise CheckFailed(
                f"{method} {path} with {what} (not valid HTTP/1.1) answered {answer.status} "
                f"{answer.content_type or 'without a content type'}: {answer.body[:120]!r}; a protocol-level "
                "rejection is 400, 408, 413, 414 or 431, and any other error answer is problem+json",
                ["ERR-PROTOCOL-001"] + (["ERR-NO-5XX-001"] if (answer.status or 0) >= 500 else []),
                exchange,
            )
    ctx.ok(ctx.alice.get(f"/sessions/{sid}/lineage"), 200)  # the server still answers
