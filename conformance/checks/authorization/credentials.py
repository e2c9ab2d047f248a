"""Credentials, and sessions a caller may not read answering exactly as unknown ids."""

from __future__ import annotations

import json
import secrets
from typing import Any

from conformance.checks.authorization.common import fetch, grant, revoke, upload
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.registry import check


def _probes(ctx: CheckContext, turn_id: str, attachment_id: str, grantee: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every operation the target offers whose path names a session: (method, path template, options)."""
    record = {"records": [{"type": "message", "content": {}}]}
    probes: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/sessions/{sid}", {}),
        ("GET", "/sessions/{sid}/transcript", {}),
        ("GET", "/sessions/{sid}/records", {}),
        ("GET", "/sessions/{sid}/lineage", {}),
        ("POST", "/sessions/{sid}/turns", {"json": {"role": "user"}}),
        ("POST", f"/sessions/{{sid}}/turns/{turn_id}/records", {"json": record}),
        ("POST", f"/sessions/{{sid}}/turns/{turn_id}/finish", {"json": {"status": "completed"}}),
        ("POST", "/sessions/{sid}/fork", {"json": {"cut": {"mode": "latest"}}}),
    ]
    if ctx.has("writer-lease"):
        probes += [
            ("POST", "/sessions/{sid}/lease", {"json": {"ttl_seconds": 2}}),
            ("DELETE", "/sessions/{sid}/lease", {"headers": {"Writer-Lease": "no-such-lease"}}),
        ]
    if ctx.has("sharing"):
        probes += [
            ("GET", "/sessions/{sid}/descendants", {}),
            ("GET", "/sessions/{sid}/grants", {}),
            ("PUT", f"/sessions/{{sid}}/grants/{grantee}", {"json": {"role": "reader"}}),
            ("DELETE", f"/sessions/{{sid}}/grants/{grantee}", {}),
            ("DELETE", "/sessions/{sid}", {}),
            ("POST", "/sessions/{sid}/purge", {}),
        ]
    if ctx.has("attachments"):
        octets = {"content": b"probe", "headers": {"Content-Type": "text/plain"}}
        probes += [
            ("POST", "/sessions/{sid}/attachments", octets),
            ("PUT", f"/sessions/{{sid}}/attachments/{attachment_id}", octets),
            ("GET", f"/sessions/{{sid}}/attachments/{attachment_id}", {}),
            ("DELETE", f"/sessions/{{sid}}/attachments/{attachment_id}", {}),
        ]
    return probes


# Answers of an owner to its own deleted session that DEL-* set apart from "unknown".
OWNER_EXCEPTIONS = {("POST", "/sessions/{sid}/fork"), ("DELETE", "/sessions/{sid}"), ("POST", "/sessions/{sid}/purge")}


def unknown_like(sid: str) -> str:
    """An id of the same length as `sid` that names nothing: equal lengths give equal Content-Length."""
    return sid[:-6] + secrets.token_hex(3) if len(sid) > 6 else secrets.token_hex(len(sid))[: len(sid)]


def differences(hidden: Response, unknown: Response, hidden_id: str, unknown_id: str) -> list[str]:
    """What tells a hidden session from an unknown one: status, problem members up to the id, headers but Date."""
    found = []
    if hidden.status != unknown.status:
        found.append(f"status {hidden.status} vs {unknown.status}")
    try:
        mine = json.loads(hidden.content.decode())
        theirs = json.loads(unknown.content.decode().replace(unknown_id, hidden_id))
    except ValueError:
        mine, theirs = hidden.content, unknown.content
    if mine != theirs:
        if isinstance(mine, dict) and isinstance(theirs, dict):
            keys = sorted(set(mine) | set(theirs))
            found += [f"body member {key!r}: {mine.get(key)!r} vs {theirs.get(key)!r}" for key in keys if mine.get(key) != theirs.get(key)]
        else:
            found.append("bodies differ")
    names = set(hidden.headers) - {"date"}, set(unknown.headers) - {"date"}
    if names[0] != names[1]:
        found.append(f"header names differ: {sorted(names[0] ^ names[1])}")
    for name in sorted(names[0] & names[1]):
        if hidden.headers[name] != unknown.headers[name]:
            found.append(f"header {name}: {hidden.headers[name]!r} vs {unknown.headers[name]!r}")
    return found


def compare_hidden(
    ctx: CheckContext, client: ApiClient, sid: str, probes: list[tuple[str, str, dict[str, Any]]], who: str, requirement: str
) -> None:
    unknown = unknown_like(sid)
    for method, template, options in probes:
        hidden = client.request(method, template.format(sid=sid), **options)
        absent = client.request(method, template.format(sid=unknown), **options)
        ctx.expect_status(hidden, 404, "not-found", requirement)
        found = differences(hidden, absent, sid, unknown)
        ctx.expect(
            not found,
            f"{who}: {method} {template} tells an existing session from an unknown id: {'; '.join(found)}",
            requirement,
        )


@check("AUTH-REQUIRED-001", title="Every operation but discovery needs a known bearer token")
def credentials_required(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    turn = ctx.start_turn(sid)
    for method, template, options in _probes(ctx, turn["turn_id"], "no-such-attachment", "someone"):
        response = ctx.anonymous.request(method, template.format(sid=sid), **options)
        ctx.expect_status(response, 401, "unauthenticated")
    unnamed: list[tuple[str, str, dict[str, Any]]] = [("POST", "/sessions", {"json": {}})]
    if ctx.has("sharing"):
        unnamed += [("GET", "/sessions", {}), ("GET", "/me", {})]
    for method, path, options in unnamed:
        ctx.expect_status(ctx.anonymous.request(method, path, **options), 401, "unauthenticated")
    for header in ("Bearer unknown-token-" + ctx.new_id("t"), "Basic YWxpY2U6c2VjcmV0", "Bearer", "Token abc"):
        response = ctx.anonymous.get(f"/sessions/{sid}", headers={"Authorization": header})
        ctx.expect_status(response, 401, "unauthenticated")
    alice, bob = (f"Bearer {client.token}" for client in (ctx.alice, ctx.bob))
    for pair in ((alice, bob), (alice, alice), (bob, alice)):  # which would count? neither
        response = ctx.anonymous.get(f"/sessions/{sid}", repeated_headers=[("Authorization", value) for value in pair])
        ctx.expect(response.status == 401, f"two Authorization headers answered {response.status}, expected 401")
        ctx.expect_status(response, 401, "unauthenticated")


@check("AUTH-HIDE-001", title="A session the caller may not read answers exactly as an unknown id, member by member and header by header")
def invisible_sessions(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(2)
    sid = source["session_id"]
    attachment = upload(ctx, ctx.alice, sid)["attachment_id"] if ctx.has("attachments") else "no-such-attachment"
    turn = ctx.start_turn(sid)
    grantee = ctx.principal_id(ctx.alice) if ctx.has("sharing") else "someone"
    probes = _probes(ctx, turn["turn_id"], attachment, grantee)
    compare_hidden(ctx, ctx.bob, sid, probes, "another principal of the project", "AUTH-HIDE-001")
    if ctx.has("sharing") and "outsider" in ctx.roles:
        compare_hidden(ctx, ctx.principals("outsider")[0], sid, probes, "a principal of another project", "AUTH-HIDE-001")
    ctx.finish(sid, turn["turn_id"])
    ctx.expect(ctx.walk(sid, "records") == records, "refused requests changed the session's records")
    if ctx.has("attachments"):
        ctx.expect_status(fetch(ctx.alice, sid, attachment), 200, None, "AUTH-HIDE-001")
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    ctx.expect_status(ctx.bob.get(f"/sessions/{child}/transcript"), 404, "not-found")
    ctx.expect_status(ctx.alice.get(f"/sessions/{child}/transcript"), 200)
    if ctx.has("sharing"):
        # A revoked grantee, and the owner of a deleted session, see what an unknown id shows.
        revoked, _, _ = ctx.conversation(1)
        grant(ctx, ctx.alice, revoked["session_id"], ctx.bob)
        revoke(ctx, ctx.alice, revoked["session_id"], ctx.bob)
        compare_hidden(ctx, ctx.bob, revoked["session_id"], probes, "a revoked grantee", "AUTH-HIDE-001")
        deleted, _, _ = ctx.conversation(1)
        response = ctx.alice.request("DELETE", f"/sessions/{deleted['session_id']}")
        ctx.expect_status(response, 204, None, "DEL-SOFT-001")
        own = [probe for probe in probes if (probe[0], probe[1]) not in OWNER_EXCEPTIONS and not probe[1].startswith("/sessions/{sid}/grants/")]
        compare_hidden(ctx, ctx.alice, deleted["session_id"], own, "the owner of a deleted session", "AUTH-HIDE-001")
