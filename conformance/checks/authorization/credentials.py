"""Credentials, and sessions a caller may not read answering exactly as unknown ids."""

from __future__ import annotations

import json
import secrets

from conformance.checks.authorization.common import delete_session, fetch, grant, revoke, upload
from conformance.checks.probes import Probe, probes
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.registry import check


# An owner's operations on its own deleted session that DEL-* set apart from "unknown".
OWNER_EXCEPTIONS = {"forkSession", "deleteSession", "purgeSession", "putGrant", "deleteGrant"}


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
    ctx: CheckContext, client: ApiClient, sid: str, probes: list[Probe], who: str, requirement: str
) -> None:
    unknown = unknown_like(sid)
    for operation_id, method, template, options in probes:
        hidden = client.request(method, template.format(sid=sid), **options)
        absent = client.request(method, template.format(sid=unknown), **options)
        ctx.expect_status(hidden, 404, "not-found", requirement)
        found = differences(hidden, absent, sid, unknown)
        ctx.expect(
            not found,
            f"{who}: {operation_id} ({method} {template}) tells an existing session from an unknown id: {'; '.join(found)}",
            requirement,
        )


@check("AUTH-REQUIRED-001", title="Every operation but discovery needs a known bearer token")
def credentials_required(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    turn = ctx.start_turn(sid)
    ids = {"turn_id": turn["turn_id"], "attachment_id": "no-such-attachment", "principal_id": "someone", "position": "1"}
    for _, method, template, options in probes(ctx, "AUTH-REQUIRED-001", ids):
        response = ctx.anonymous.request(method, template.format(sid=sid), **options)
        ctx.expect_status(response, 401, "unauthenticated")
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
    ids = {"turn_id": turn["turn_id"], "attachment_id": attachment, "principal_id": grantee, "position": "1"}
    every = probes(ctx, "AUTH-HIDE-001", ids)
    compare_hidden(ctx, ctx.bob, sid, every, "another principal of the project", "AUTH-HIDE-001")
    if ctx.has("sharing") and "outsider" in ctx.roles:
        compare_hidden(ctx, ctx.principals("outsider")[0], sid, every, "a principal of another project", "AUTH-HIDE-001")
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
        compare_hidden(ctx, ctx.bob, revoked["session_id"], every, "a revoked grantee", "AUTH-HIDE-001")
        deleted, _, _ = ctx.conversation(1)
        delete_session(ctx, ctx.alice, deleted["session_id"])
        own = [probe for probe in every if probe[0] not in OWNER_EXCEPTIONS]
        compare_hidden(ctx, ctx.alice, deleted["session_id"], own, "the owner of a deleted session", "AUTH-HIDE-001")
