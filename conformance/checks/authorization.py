"""Chapter: authorization - credentials, invisible sessions, projects, roles and grants, reads
through a lineage, attachments, deletion and listings.

The principals play roles (conformance/config.py ROLES): `owner` (alice), `stranger` (bob),
`reader` (carol) and `writer` (dave) share one project, `outsider` belongs to another. A check that
needs more principals than configured fails as not testable.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.matrix import CAPABILITY_OPERATIONS, LISTED, OPERATIONS, POSITIONS, ROLES, ABSENT, Matrix
from conformance.registry import check

PROBLEM = "urn:session-lineage:problem:"


# ---------------------------------------------------------------- setup helpers
def grant(ctx: CheckContext, owner: ApiClient, sid: str, grantee: ApiClient, role: str = "reader") -> dict[str, Any]:
    response = owner.request("PUT", f"/sessions/{sid}/grants/{ctx.principal_id(grantee)}", json={"role": role})
    ctx.expect_status(response, 200, None, "AUTH-GRANT-001")
    return response.json()


def revoke(ctx: CheckContext, owner: ApiClient, sid: str, grantee: ApiClient) -> None:
    response = owner.request("DELETE", f"/sessions/{sid}/grants/{ctx.principal_id(grantee)}")
    ctx.expect_status(response, 204, None, "AUTH-REVOKE-001")


def upload(
    ctx: CheckContext, client: ApiClient, sid: str, content: bytes | None = None, media_type: str = "application/octet-stream"
) -> dict[str, Any]:
    body = content if content is not None else secrets.token_bytes(24)
    response = client.post(f"/sessions/{sid}/attachments", content=body, headers={"Content-Type": media_type})
    ctx.expect_status(response, 201, None, "ATT-STORE-001")
    return response.json()


def fetch(client: ApiClient, sid: str, attachment_id: str) -> Response:
    return client.get(f"/sessions/{sid}/attachments/{attachment_id}")


def turn_with_attachment(ctx: CheckContext, client: ApiClient, sid: str, attach: bool) -> str | None:
    """A finished turn of one record, with an attachment stored before the record (so a fork
    through this turn inherits it); the attachment id, or None without `attach`."""
    turn = ctx.start_turn(sid, client=client)
    attachment = upload(ctx, client, sid)["attachment_id"] if attach else None
    ctx.append(sid, turn["turn_id"], 1, client=client)
    ctx.finish(sid, turn["turn_id"], client=client)
    return attachment


def answer(response: Response) -> str:
    """A response as the matrix writes it: the status, and the problem kind for errors."""
    if response.status >= 400 and (response.problem_type or "").startswith(PROBLEM):
        return f"{response.status} {response.problem_type[len(PROBLEM):]}"
    return str(response.status)


def listed_access(ctx: CheckContext, client: ApiClient, sid: str, path: str = "/sessions") -> str | None:
    """The `access` a listing gives the session, or None when the listing leaves it out."""
    found: str | None = None
    cursor = None
    for _ in range(1000):
        response = client.get(path, params={"cursor": cursor, "limit": ctx.limits["max_page_size"]})
        ctx.expect_status(response, 200, None, "LIST-SESSIONS-001" if path == "/sessions" else "LIST-DESCENDANTS-001")
        page = response.json()
        for item in page["sessions"]:
            if item["session"]["session_id"] == sid:
                found = item["access"]
        if not page["has_more"]:
            return found
        cursor = page["next_cursor"]
    raise CheckFailed(f"{path}: pagination did not end within 1000 pages", ["LIST-SESSIONS-001"])


def walk_listing(ctx: CheckContext, client: ApiClient, path: str, limit: int, requirement: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(10_000):
        response = client.get(path, params={"cursor": cursor, "limit": limit})
        ctx.expect_status(response, 200, None, requirement)
        page = response.json()
        ctx.expect(len(page["sessions"]) <= limit, f"{path}: a page of limit {limit} held {len(page['sessions'])} items", requirement)
        items.extend(page["sessions"])
        if not page["has_more"]:
            return items
        ctx.expect(bool(page["sessions"]) and page["next_cursor"] is not None, f"{path}: has_more without items or cursor", requirement)
        cursor = page["next_cursor"]
    raise CheckFailed(f"{path}: pagination did not end", [requirement])


@dataclass
class ThreeOwners:
    """A chain root -> middle -> leaf owned by alice, carol and dave. Each later owner holds reader
    grants on the ancestors (it needed them to fork); each session holds an own attachment stored
    after the fork below it, so no descendant inherits it."""

    ids: dict[str, str]
    owners: dict[str, ApiClient]
    root_attachment: str | None
    own_attachment: dict[str, str]


def three_owners(ctx: CheckContext, alice: ApiClient, carol: ApiClient, dave: ApiClient) -> ThreeOwners:
    attach = ctx.has("attachments")
    root = ctx.create_session(alice)["session_id"]
    root_attachment = turn_with_attachment(ctx, alice, root, attach)
    grant(ctx, alice, root, carol)
    middle = ctx.fork_ok(root, client=carol)["session"]["session_id"]
    turn_with_attachment(ctx, carol, middle, attach)
    grant(ctx, alice, root, dave)
    grant(ctx, carol, middle, dave)
    leaf = ctx.fork_ok(middle, client=dave)["session"]["session_id"]
    turn_with_attachment(ctx, dave, leaf, attach)
    ids = {"root": root, "middle": middle, "leaf": leaf}
    owners = {"root": alice, "middle": carol, "leaf": dave}
    own = {position: upload(ctx, owners[position], sid)["attachment_id"] for position, sid in ids.items()} if attach else {}
    return ThreeOwners(ids, owners, root_attachment, own)


# ---------------------------------------------------------------- credentials and non-disclosure
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


# ---------------------------------------------------------------- projects and ids
@check("AUTH-PRINCIPAL-001", "AUTH-NAMESPACE-001", title="Principals belong to projects; ids are unique per project", needs=("sharing",))
def projects_and_ids(ctx: CheckContext) -> None:
    alice, bob, outsider = ctx.principals("owner", "stranger", "outsider")
    me = {}
    for name, client in (("owner", alice), ("stranger", bob), ("outsider", outsider)):
        response = client.get("/me")
        ctx.expect_status(response, 200, None, "AUTH-PRINCIPAL-001")
        me[name] = response.json()
    ctx.expect(len({item["principal_id"] for item in me.values()}) == 3, f"three tokens, principals {me}", "AUTH-PRINCIPAL-001")
    ctx.expect(
        me["owner"]["project_id"] == me["stranger"]["project_id"] != me["outsider"]["project_id"],
        f"owner and stranger share a project, the outsider is in another: {me}",
        "AUTH-PRINCIPAL-001",
    )
    source, turns, records = ctx.conversation(1, name="alice's")
    sid = source["session_id"]
    # Another project: the same session id, fork target and turn id are free.
    theirs = outsider.post("/sessions", json={"session_id": sid, "name": "outsider's"})
    ctx.expect_status(theirs, 201, None, "AUTH-NAMESPACE-001")
    ctx.expect(theirs.json()["name"] == "outsider's", f"the outsider's session {theirs.json()}", "AUTH-NAMESPACE-001")
    turn = outsider.post(f"/sessions/{sid}/turns", json={"role": "user", "turn_id": turns[0]["turn_id"]})
    ctx.expect_status(turn, 201, None, "AUTH-NAMESPACE-001")
    ctx.finish(sid, turns[0]["turn_id"], client=outsider)
    target = ctx.fork_ok(sid, client=ctx.alice)["session"]["session_id"]
    forked = outsider.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}, "target_session_id": target})
    ctx.expect_status(forked, 201, None, "AUTH-NAMESPACE-001")
    ctx.expect(ctx.alice.get(f"/sessions/{sid}").json()["name"] == "alice's", "the outsider changed alice's session", "AUTH-NAMESPACE-001")
    ctx.expect(ctx.keys(ctx.walk(sid)) == ctx.keys(records), "the outsider's turn reached alice's session", "AUTH-NAMESPACE-001")
    ctx.expect(
        ctx.walk(target) == records and ctx.walk(target, client=outsider) != records,
        "each project's fork to one target id inherits from its own project's source",
        "AUTH-NAMESPACE-001",
    )
    # The same project: the namespace is shared, so taken ids conflict even when unreadable.
    own = ctx.create_session(bob)["session_id"]
    ctx.expect_status(bob.post("/sessions", json={"session_id": sid}), 409, "session-exists", "AUTH-NAMESPACE-001")
    ctx.expect_status(
        bob.post(f"/sessions/{own}/fork", json={"cut": {"mode": "latest"}, "target_session_id": target}),
        409, "target-conflict", "AUTH-NAMESPACE-001",
    )
    ctx.expect_status(
        bob.post(f"/sessions/{own}/turns", json={"role": "user", "turn_id": turns[0]["turn_id"]}),
        409, "turn-exists", "AUTH-NAMESPACE-001",
    )
    ctx.expect_status(outsider.get(f"/sessions/{own}"), 404, "not-found", "AUTH-PRINCIPAL-001")


# ---------------------------------------------------------------- grants
@check("AUTH-GRANT-001", "AUTH-GRANT-LIST-001", title="The owner grants and lists reader and writer roles within its project", needs=("sharing",))
def grants(ctx: CheckContext) -> None:
    alice, carol, dave = ctx.principals("owner", "reader", "writer")
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    given = grant(ctx, alice, sid, carol, "reader")
    ctx.expect(
        (given["principal_id"], given["role"], given["session_id"]) == (ctx.principal_id(carol), "reader", sid),
        f"the grant answered {given}", "AUTH-GRANT-001",
    )
    grant(ctx, alice, sid, dave, "reader")
    changed = grant(ctx, alice, sid, dave, "writer")
    ctx.expect(changed["role"] == "writer", f"granting again must replace the role: {changed}", "AUTH-GRANT-001")
    listed = alice.get(f"/sessions/{sid}/grants")
    ctx.expect_status(listed, 200, None, "AUTH-GRANT-LIST-001")
    roles = {item["principal_id"]: item["role"] for item in listed.json()["grants"]}
    expected = {ctx.principal_id(carol): "reader", ctx.principal_id(dave): "writer"}
    ctx.expect(roles == expected, f"grants listed {roles}, expected {expected}", "AUTH-GRANT-LIST-001")
    # Outside the project, or no such principal: the same answer, nothing changes.
    refused = []
    strangers = ["no-such-principal-" + secrets.token_hex(4)]
    if "outsider" in ctx.roles:
        strangers.append(ctx.principal_id(ctx.principals("outsider")[0]))
    for principal in strangers:
        response = alice.request("PUT", f"/sessions/{sid}/grants/{principal}", json={"role": "reader"})
        ctx.expect_status(response, 422, "unknown-principal", "AUTH-GRANT-001")
        refused.append(response.json()["title"])
    ctx.expect(len(set(refused)) == 1, f"refusals tell unknown principals from other projects' apart: {refused}", "AUTH-GRANT-001")
    response = alice.request("PUT", f"/sessions/{sid}/grants/{ctx.principal_id(alice)}", json={"role": "reader"})
    ctx.expect_status(response, 422, "invalid-request", "AUTH-GRANT-001")
    again = {item["principal_id"]: item["role"] for item in alice.get(f"/sessions/{sid}/grants").json()["grants"]}
    ctx.expect(again == expected, f"refused grants changed the grants: {again}", "AUTH-GRANT-001")
    revoke(ctx, alice, sid, carol)
    after = {item["principal_id"] for item in alice.get(f"/sessions/{sid}/grants").json()["grants"]}
    ctx.expect(ctx.principal_id(carol) not in after, "a revoked grant is still listed", "AUTH-GRANT-LIST-001")


@check("AUTH-GRANT-SCOPE-001", title="A grant names one session: not its ancestors, not forks others make", needs=("sharing",))
def grant_scope(ctx: CheckContext) -> None:
    alice, bob, carol, dave = ctx.principals("owner", "stranger", "reader", "writer")
    root, _, _ = ctx.conversation(1)
    rid = root["session_id"]
    grant(ctx, alice, rid, carol)
    own_fork = ctx.fork_ok(rid, client=alice)["session"]["session_id"]
    ctx.expect_status(carol.get(f"/sessions/{own_fork}"), 404, "not-found", "AUTH-GRANT-SCOPE-001")
    carols = ctx.fork_ok(rid, client=carol)
    child = carols["session"]["session_id"]
    ctx.expect_status(carol.get(f"/sessions/{child}"), 200, None, "AUTH-GRANT-SCOPE-001")
    ctx.expect_status(alice.get(f"/sessions/{child}"), 404, "not-found", "AUTH-GRANT-SCOPE-001")
    listed = carol.get(f"/sessions/{child}/grants")
    ctx.expect_status(listed, 200, None, "AUTH-GRANT-SCOPE-001")
    ctx.expect(listed.json()["grants"] == [], f"a fork starts without grants: {listed.json()}", "AUTH-GRANT-SCOPE-001")
    grant(ctx, carol, child, dave, "writer")
    ctx.expect_status(dave.get(f"/sessions/{child}"), 200, None, "AUTH-GRANT-SCOPE-001")
    ctx.expect_status(dave.get(f"/sessions/{rid}"), 404, "not-found", "AUTH-GRANT-SCOPE-001")
    ctx.expect_status(bob.get(f"/sessions/{child}"), 404, "not-found", "AUTH-GRANT-SCOPE-001")


# ---------------------------------------------------------------- reads through the lineage
@check("AUTH-LINEAGE-READ-001", "AUTH-FORK-001", title="Reads of what a session inherits need a role on every ancestor", needs=("sharing",))
def reads_need_every_ancestor(ctx: CheckContext) -> None:
    alice, bob, carol, dave = ctx.principals("owner", "stranger", "reader", "writer")
    chain = three_owners(ctx, alice, carol, dave)
    leaf = chain.ids["leaf"]
    grant(ctx, dave, leaf, bob)  # the leaf only
    records = ctx.walk(leaf, "records", client=dave)
    ctx.expect_status(bob.get(f"/sessions/{leaf}"), 200, None, "AUTH-LINEAGE-READ-001")
    ctx.expect(ctx.walk(leaf, "records", client=bob) == records, "own records of a readable session", "AUTH-LINEAGE-READ-001")
    for path in (f"/sessions/{leaf}/transcript", f"/sessions/{leaf}/lineage"):
        response = bob.get(path)
        ctx.expect_status(response, 403, "ancestor-not-readable", "AUTH-LINEAGE-READ-001")
        ctx.expect(chain.ids["root"] not in response.content.decode(), f"{path}: the refusal names the ancestor", "AUTH-LINEAGE-READ-001")
    forked = bob.post(f"/sessions/{leaf}/fork", json={"cut": {"mode": "latest"}})
    ctx.expect_status(forked, 403, "ancestor-not-readable", "AUTH-FORK-001")
    descendants = dave.get(f"/sessions/{leaf}/descendants").json()["sessions"]
    ctx.expect(descendants == [], f"a refused fork created {descendants}", "AUTH-FORK-001")
    if chain.root_attachment:
        ctx.expect_status(fetch(bob, leaf, chain.root_attachment), 403, "ancestor-not-readable", "AUTH-LINEAGE-READ-001")
        ctx.expect_status(fetch(bob, leaf, chain.own_attachment["leaf"]), 200, None, "AUTH-LINEAGE-READ-001")
    grant(ctx, carol, chain.ids["middle"], bob)
    ctx.expect_status(bob.get(f"/sessions/{leaf}/transcript"), 403, "ancestor-not-readable", "AUTH-LINEAGE-READ-001")
    grant(ctx, alice, chain.ids["root"], bob)
    ctx.expect(ctx.walk(leaf, client=bob) == ctx.walk(leaf, client=dave), "with every ancestor readable, the transcript", "AUTH-LINEAGE-READ-001")
    ctx.expect_status(bob.get(f"/sessions/{leaf}/lineage"), 200, None, "AUTH-LINEAGE-READ-001")
    child = bob.post(f"/sessions/{leaf}/fork", json={"cut": {"mode": "latest"}})
    ctx.expect_status(child, 201, None, "AUTH-FORK-001")
    mine = child.json()["session"]["session_id"]
    ctx.expect(listed_access(ctx, bob, mine) == "owner", "the child belongs to whoever forks", "AUTH-FORK-001")
    ctx.expect_status(dave.get(f"/sessions/{mine}"), 404, "not-found", "AUTH-FORK-001")


@check("AUTH-REVOKE-001", "AUTH-REVOKE-CASCADE-001", title="A revocation takes effect at once, through every descendant", needs=("sharing",))
def revocation_cascades(ctx: CheckContext) -> None:
    alice, carol, dave = ctx.principals("owner", "reader", "writer")
    chain = three_owners(ctx, alice, carol, dave)
    root, middle, leaf = (chain.ids[p] for p in POSITIONS)
    before = ctx.walk(leaf, client=dave)
    revoke(ctx, alice, root, dave)
    ctx.expect_status(dave.get(f"/sessions/{root}"), 404, "not-found", "AUTH-REVOKE-CASCADE-001")
    ctx.expect_status(dave.get(f"/sessions/{leaf}"), 200, None, "AUTH-REVOKE-CASCADE-001")
    ctx.expect(ctx.walk(leaf, "records", client=dave) == [r for r in before if r["session_id"] == leaf], "own records", "AUTH-REVOKE-CASCADE-001")
    for path in (f"/sessions/{leaf}/transcript", f"/sessions/{leaf}/lineage"):
        response = dave.get(path)
        ctx.expect_status(response, 403, "ancestor-not-readable", "AUTH-REVOKE-CASCADE-001")
        leaked = [r["record_id"] for r in before if r["session_id"] == root and r["record_id"] in response.content.decode()]
        ctx.expect(not leaked, f"{path} after revocation holds the root's records {leaked}", "AUTH-REVOKE-CASCADE-001")
    ctx.expect_status(dave.post(f"/sessions/{leaf}/fork", json={"cut": {"mode": "latest"}}), 403, "ancestor-not-readable", "AUTH-REVOKE-CASCADE-001")
    if chain.root_attachment:
        ctx.expect_status(fetch(dave, leaf, chain.root_attachment), 403, "ancestor-not-readable", "AUTH-REVOKE-CASCADE-001")
        ctx.expect_status(fetch(dave, leaf, chain.own_attachment["leaf"]), 200, None, "AUTH-REVOKE-CASCADE-001")
    # carol keeps her grant on the root: her middle still reads.
    ctx.expect_status(carol.get(f"/sessions/{middle}/transcript"), 200, None, "AUTH-REVOKE-CASCADE-001")
    revoke(ctx, alice, root, dave)  # again: nothing to revoke, still 204
    grant(ctx, alice, root, dave)
    ctx.expect(ctx.walk(leaf, client=dave) == before, "granting again restores the same transcript", "AUTH-REVOKE-001")


# ---------------------------------------------------------------- the matrix
def perform(ctx: CheckContext, operation: str, actor: ApiClient, chain: ThreeOwners, position: str, role: str) -> str:
    sid = chain.ids[position]
    if operation == "read session":
        return answer(actor.get(f"/sessions/{sid}"))
    if operation == "lineage":
        return answer(actor.get(f"/sessions/{sid}/lineage"))
    if operation == "transcript":
        return answer(actor.get(f"/sessions/{sid}/transcript"))
    if operation == "attachment read":
        assert chain.root_attachment is not None
        return answer(fetch(actor, sid, chain.root_attachment))
    if operation == "list":
        access = listed_access(ctx, actor, sid)
        return ABSENT if access is None else LISTED if access == role else f"listed as {access}"
    if operation == "descendants":
        return answer(actor.get(f"/sessions/{sid}/descendants"))
    if operation == "fork":
        return answer(actor.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}))
    if operation == "append":
        started = actor.post(f"/sessions/{sid}/turns", json={"role": "user"})
        if started.status == 201:
            ctx.finish(sid, started.json()["turn_id"], client=actor)
        return answer(started)
    if operation == "grant":
        grantee = chain.owners["leaf" if position == "root" else "root"]
        return answer(actor.request("PUT", f"/sessions/{sid}/grants/{ctx.principal_id(grantee)}", json={"role": "reader"}))
    if operation == "attachment delete":
        return answer(actor.request("DELETE", f"/sessions/{sid}/attachments/{chain.own_attachment[position]}"))
    if operation == "delete":
        return answer(actor.request("DELETE", f"/sessions/{sid}"))
    if operation == "export":
        return answer(actor.get(f"/sessions/{sid}/export"))
    if operation == "turn at":
        return answer(actor.get(f"/sessions/{sid}/effective-turns/1"))
    raise ValueError(operation)


# The matrix needs `sharing`: it cites only rules of that capability (and of `attachments`), so a
# server without them is judged on AUTH-HIDE-001 by `invisible_sessions` alone; a wrong 404 cell
# still reports AUTH-HIDE-001 as failed.
MATRIX_REQUIREMENTS = (
    "AUTH-ROLES-001",
    "AUTH-LINEAGE-READ-001",
    "AUTH-FORK-001",
    "AUTH-GRANT-001",
    "AUTH-REVOKE-CASCADE-001",
    "LIST-SESSIONS-001",
    "LIST-DESCENDANTS-001",
    "DEL-SOFT-001",
    "ATT-READ-001",
    "ATT-INHERIT-001",
    "ATT-IMMUTABLE-001",
)


@check(*MATRIX_REQUIREMENTS, title="Authorization matrix: 5 roles x 9 to 13 operations x root, middle and leaf of a three-owner chain", needs=("sharing",))
def authorization_matrix(ctx: CheckContext) -> None:
    alice, bob, carol, dave = ctx.principals("owner", "stranger", "reader", "writer")
    matrix = Matrix(tuple(op for op in OPERATIONS if op not in CAPABILITY_OPERATIONS or ctx.has(CAPABILITY_OPERATIONS[op])))
    for position in POSITIONS:
        for role in ROLES:
            chain = three_owners(ctx, alice, carol, dave)  # fresh: the last operation deletes
            sid, owner = chain.ids[position], chain.owners[position]
            actor = owner if role == "owner" else bob
            if role in ("reader", "writer", "revoked"):
                grant(ctx, owner, sid, bob, "writer" if role == "writer" else "reader")
            if role == "revoked":
                revoke(ctx, owner, sid, bob)
            for operation in matrix.operations:
                matrix.record(role, position, operation, perform(ctx, operation, actor, chain, position, role))
    ctx.details["authorization_matrix"] = matrix.as_details()
    wrong = matrix.failures()
    if wrong:
        lines = [
            f"  {cell.role} at the {cell.position}, {cell.operation}: expected {cell.expected}, got {cell.observed} ({cell.requirement})"
            for cell in wrong[:24]
        ]
        raise CheckFailed(
            f"{len(wrong)} of {len(matrix.cells)} matrix cells answered wrongly:\n" + "\n".join(lines) + "\n" + matrix.render(),
            sorted({cell.requirement for cell in wrong}),
        )


# ---------------------------------------------------------------- attachments
@check("ATT-STORE-001", "ATT-READ-001", title="Attachments are stored and read back byte for byte, within the advertised size", needs=("attachments",))
def attachments_round_trip(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    limit = ctx.limits.get("max_attachment_bytes")
    ctx.expect(isinstance(limit, int) and limit > 0, f"max_attachment_bytes is {limit!r}", "ATT-STORE-001")
    for content, media_type in ((bytes(range(256)) * 3, "application/octet-stream"), ("héllo\n".encode(), "text/plain; charset=utf-8"), (b"", "application/x-empty")):
        stored = upload(ctx, ctx.alice, sid, content, media_type)
        ctx.expect(
            (stored["session_id"], stored["media_type"], stored["size"]) == (sid, media_type, len(content)),
            f"stored {stored}", "ATT-STORE-001",
        )
        read = fetch(ctx.alice, sid, stored["attachment_id"])
        ctx.expect_status(read, 200, None, "ATT-READ-001")
        ctx.expect(read.content == content, f"read back {len(read.content)} bytes, stored {len(content)}", "ATT-READ-001")
        ctx.expect(read.header("content-type") == media_type, f"Content-Type {read.header('content-type')!r}, stored {media_type!r}", "ATT-READ-001")
    at_limit = ctx.new_id("a")
    response = ctx.alice.request("PUT", f"/sessions/{sid}/attachments/{at_limit}", content=b"x" * limit, headers={"Content-Type": "application/octet-stream"})
    ctx.expect_status(response, 201, None, "ATT-STORE-001")
    over = ctx.new_id("a")
    response = ctx.alice.request("PUT", f"/sessions/{sid}/attachments/{over}", content=b"x" * (limit + 1), headers={"Content-Type": "application/octet-stream"})
    ctx.expect_status(response, 413, "payload-too-large", "ATT-STORE-001")
    ctx.expect_status(fetch(ctx.alice, sid, over), 404, "not-found", "ATT-STORE-001")
    for headers in ({}, {"Content-Type": "not a media type"}, {"Content-Type": "/plain"}):
        nameless = ctx.new_id("a")
        response = ctx.alice.request("PUT", f"/sessions/{sid}/attachments/{nameless}", content=b"abc", headers=headers)
        ctx.expect_status(response, 415, "unsupported-media-type", "ATT-STORE-001")
        ctx.expect_status(fetch(ctx.alice, sid, nameless), 404, "not-found", "ATT-STORE-001")
    ctx.expect_status(fetch(ctx.alice, sid, ctx.new_id("missing")), 404, "not-found", "ATT-READ-001")


@check("ATT-IDEMPOTENT-001", title="An upload retried with its Idempotency-Key stores nothing twice", needs=("attachments",))
def attachment_upload_retries(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    key, content = ctx.new_id("key"), secrets.token_bytes(64)

    def send(client: ApiClient, body: bytes, where: str = sid) -> Response:
        return client.post(f"/sessions/{where}/attachments", content=body, headers={"Content-Type": "image/png", "Idempotency-Key": f'"{key}"'})

    first, again = send(ctx.alice, content), send(ctx.alice, content)
    ctx.expect_status(first, 201, None, "ATT-STORE-001")
    ctx.expect_status(again, 201, None, "ATT-IDEMPOTENT-001")
    ctx.expect(
        again.json() == first.json() and again.header("Idempotency-Replayed") == "true" and first.header("Idempotency-Replayed") != "true",
        f"the retry answered {again.json()} (replayed {again.header('Idempotency-Replayed')!r}), first {first.json()}",
        "ATT-IDEMPOTENT-001",
    )
    ctx.expect_status(send(ctx.alice, content + b"!"), 422, "idempotency-key-reused", "ATT-IDEMPOTENT-001")
    theirs = ctx.create_session(ctx.bob)["session_id"]
    other = send(ctx.bob, content, theirs)
    ctx.expect_status(other, 201, None, "ATT-IDEMPOTENT-001")
    ctx.expect(other.header("Idempotency-Replayed") != "true" and other.json()["session_id"] == theirs, "another principal's key", "ATT-IDEMPOTENT-001")


@check("ATT-ID-001", title="A client-chosen attachment id names one attachment in the session's reach", needs=("attachments",))
def attachment_client_ids(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    chosen, content = ctx.new_id("att"), b"first content"

    def put(where: str, body: bytes, media_type: str = "text/plain") -> Response:
        return ctx.alice.request("PUT", f"/sessions/{where}/attachments/{chosen}", content=body, headers={"Content-Type": media_type})

    first, again = put(sid, content), put(sid, content)
    ctx.expect_status(first, 201, None, "ATT-STORE-001")
    ctx.expect_status(again, 201, None, "ATT-ID-001")
    ctx.expect(again.json() == first.json() and again.header("Idempotency-Replayed") == "true", f"a repeated PUT answered {again.json()}", "ATT-ID-001")
    ctx.expect_status(put(sid, b"other content"), 409, "attachment-exists", "ATT-ID-001")
    ctx.expect_status(put(sid, content, "text/csv"), 409, "attachment-exists", "ATT-ID-001")
    ctx.expect(fetch(ctx.alice, sid, chosen).content == content, "a refused PUT changed the attachment", "ATT-ID-001")
    turn = ctx.start_turn(sid)
    ctx.append(sid, turn["turn_id"], 1)  # a record after the attachment: a fork inherits it
    ctx.finish(sid, turn["turn_id"])
    child = ctx.fork_ok(sid)["session"]["session_id"]
    ctx.expect_status(put(child, b"mine"), 409, "attachment-exists", "ATT-ID-001")
    ctx.expect(fetch(ctx.alice, child, chosen).content == content, "the inherited attachment changed", "ATT-ID-001")


@check("ATT-INHERIT-001", title="Forks read exactly the attachments stored before their last inherited record, same ids, no copies", needs=("attachments",))
def attachment_inheritance(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    turn = ctx.start_turn(sid)
    before_any = upload(ctx, ctx.alice, sid, b"before any record")  # position 0
    ctx.append(sid, turn["turn_id"], 1)
    mid_turn = upload(ctx, ctx.alice, sid, b"between records")  # position 1
    ctx.append(sid, turn["turn_id"], 1)
    after_last = upload(ctx, ctx.alice, sid, b"after the last record")  # position 2: nothing follows
    ctx.finish(sid, turn["turn_id"])
    second = ctx.start_turn(sid, "assistant")
    in_second = upload(ctx, ctx.alice, sid, b"in the second turn")
    ctx.append(sid, second["turn_id"], 1)
    ctx.finish(sid, second["turn_id"])
    all_ids = {a["attachment_id"]: a for a in (before_any, mid_turn, after_last, in_second)}

    def reach(child: str) -> set[str]:
        found = set()
        for attachment_id, stored in all_ids.items():
            response = fetch(ctx.alice, child, attachment_id)
            ctx.expect_status(response, (200, 404), None, "ATT-INHERIT-001")
            if response.status == 200:
                ctx.expect(response.content == fetch(ctx.alice, sid, attachment_id).content, "inherited bytes differ", "ATT-INHERIT-001")
                found.add(attachment_id)
            else:
                ctx.expect_status(response, 404, "not-found", "ATT-INHERIT-001")
        return found

    cases = [
        ({"mode": "before", "turn_id": turn["turn_id"]}, set()),
        ({"mode": "through", "turn_id": turn["turn_id"]}, {before_any["attachment_id"], mid_turn["attachment_id"]}),
        ({"mode": "latest"}, {before_any["attachment_id"], mid_turn["attachment_id"], after_last["attachment_id"], in_second["attachment_id"]}),
    ]
    children = []
    for cut, expected in cases:
        child = ctx.fork_ok(sid, cut)["session"]["session_id"]
        children.append(child)
        got = reach(child)
        ctx.expect(got == expected, f"a fork with cut {cut} reaches {sorted(got)}, expected {sorted(expected)}", "ATT-INHERIT-001")
    late = upload(ctx, ctx.alice, sid, b"stored after the forks")
    third = ctx.start_turn(sid)
    ctx.append(sid, third["turn_id"], 2)
    ctx.finish(sid, third["turn_id"])
    for child in children:
        ctx.expect_status(fetch(ctx.alice, child, late["attachment_id"]), 404, "not-found", "ATT-INHERIT-001")
    grandchild = ctx.fork_ok(children[1])["session"]["session_id"]
    ctx.expect(reach(grandchild) == cases[1][1], "a grandchild reaches what its parent inherited", "ATT-INHERIT-001")
    described = ctx.alice.post(f"/sessions/{grandchild}/attachments", content=b"x", headers={"Content-Type": "text/plain"})
    ctx.expect_status(described, 201, None, "ATT-STORE-001")
    ctx.expect(described.json()["session_id"] == grandchild, "an attachment belongs to the session it is stored in", "ATT-INHERIT-001")


@check("ATT-IMMUTABLE-001", "DEL-STABLE-001", title="Inherited attachments cannot be deleted, through the child or at their source", needs=("attachments",))
def attachment_immutability(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    inherited = turn_with_attachment(ctx, ctx.alice, sid, True)
    assert inherited is not None
    child = ctx.fork_ok(sid)["session"]["session_id"]
    later = upload(ctx, ctx.alice, sid, b"not inherited")["attachment_id"]
    own = upload(ctx, ctx.alice, child, b"the child's own")["attachment_id"]
    content = fetch(ctx.alice, child, inherited).content
    for where in (child, sid):  # through the child, and at its source
        response = ctx.alice.request("DELETE", f"/sessions/{where}/attachments/{inherited}")
        ctx.expect_status(response, 409, "attachment-inherited", "ATT-IMMUTABLE-001")
        after = fetch(ctx.alice, child, inherited)
        ctx.expect(after.status == 200 and after.content == content, "a refused delete changed the inherited attachment", "DEL-STABLE-001")
    ctx.expect_status(fetch(ctx.alice, sid, inherited), 200, None, "ATT-IMMUTABLE-001")
    for where, attachment_id in ((sid, later), (child, own)):
        ctx.expect_status(ctx.alice.request("DELETE", f"/sessions/{where}/attachments/{attachment_id}"), 204, None, "ATT-IMMUTABLE-001")
        ctx.expect_status(fetch(ctx.alice, where, attachment_id), 404, "not-found", "ATT-IMMUTABLE-001")
    ctx.expect_status(ctx.alice.request("DELETE", f"/sessions/{child}/attachments/{later}"), 404, "not-found", "ATT-IMMUTABLE-001")


# ---------------------------------------------------------------- deletion
@check("DEL-SOFT-001", "DEL-FORK-001", title="A deleted session is gone for everyone, its owner included, and cannot be forked", needs=("sharing",))
def soft_delete(ctx: CheckContext) -> None:
    alice, carol = ctx.principals("owner", "reader")
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    parent = ctx.create_session()["session_id"]
    turn_with_attachment(ctx, alice, parent, False)
    grant(ctx, alice, sid, carol)
    ctx.expect_status(carol.request("DELETE", f"/sessions/{sid}"), 403, "forbidden", "DEL-SOFT-001")
    ctx.expect_status(alice.request("DELETE", f"/sessions/{sid}"), 204, None, "DEL-SOFT-001")
    for client in (alice, carol):
        for path in ("", "/transcript", "/records", "/lineage", "/descendants"):
            ctx.expect_status(client.get(f"/sessions/{sid}{path}"), 404, "not-found", "DEL-SOFT-001")
        ctx.expect(listed_access(ctx, client, sid) is None, "a deleted session is still listed", "DEL-SOFT-001")
    ctx.expect_status(alice.post(f"/sessions/{sid}/turns", json={"role": "user"}), 404, "not-found", "DEL-SOFT-001")
    ctx.expect_status(alice.request("DELETE", f"/sessions/{sid}"), 204, None, "DEL-SOFT-001")
    ctx.expect_status(carol.request("DELETE", f"/sessions/{sid}"), 404, "not-found", "DEL-SOFT-001")
    revoked = alice.request("DELETE", f"/sessions/{sid}/grants/{ctx.principal_id(carol)}")
    ctx.expect_status(revoked, 204, None, "DEL-SOFT-001")
    # Forking it: its owner learns it is deleted, others only that it is not there.
    grant(ctx, alice, parent, carol)
    child = ctx.fork_ok(parent)["session"]["session_id"]
    grant(ctx, alice, child, carol)
    ctx.expect_status(alice.request("DELETE", f"/sessions/{child}"), 204, None, "DEL-SOFT-001")
    ctx.expect_status(alice.post(f"/sessions/{child}/fork", json={"cut": {"mode": "latest"}}), 409, "session-deleted", "DEL-FORK-001")
    ctx.expect_status(carol.post(f"/sessions/{child}/fork", json={"cut": {"mode": "latest"}}), 404, "not-found", "DEL-FORK-001")
    target = ctx.new_id("never")
    ctx.expect_status(
        alice.post(f"/sessions/{child}/fork", json={"cut": {"mode": "latest"}, "target_session_id": target}),
        409, "session-deleted", "DEL-FORK-001",
    )
    ctx.expect_status(alice.get(f"/sessions/{target}"), 404, "not-found", "DEL-FORK-001")
    ctx.expect(listed_access(ctx, alice, child, f"/sessions/{parent}/descendants") is None, "a deleted child is listed", "DEL-SOFT-001")


@check("DEL-DESCENDANTS-001", "DEL-STABLE-001", title="Deleted ancestors keep serving their descendants, unchanged", needs=("sharing",))
def deleted_ancestors_serve(ctx: CheckContext) -> None:
    alice, bob, carol, dave = ctx.principals("owner", "stranger", "reader", "writer")
    chain = three_owners(ctx, alice, carol, dave)
    root, middle, leaf = (chain.ids[p] for p in POSITIONS)
    for position, sid in chain.ids.items():  # bob reads the leaf through every ancestor
        grant(ctx, chain.owners[position], sid, bob)

    def snapshot(client: ApiClient) -> Any:
        lineage = client.get(f"/sessions/{leaf}/lineage")
        ctx.expect_status(lineage, 200, None, "DEL-DESCENDANTS-001")
        attachment = fetch(client, leaf, chain.root_attachment).content if chain.root_attachment else None
        return ctx.walk(leaf, client=client), lineage.json(), attachment

    before = {"dave": snapshot(dave), "bob": snapshot(bob)}
    ctx.expect_status(alice.request("DELETE", f"/sessions/{root}"), 204, None, "DEL-SOFT-001")
    ctx.expect_status(carol.request("DELETE", f"/sessions/{middle}"), 204, None, "DEL-SOFT-001")
    ctx.expect_status(alice.post(f"/sessions/{root}/purge"), 409, "live-descendants", "DEL-STABLE-001")
    if chain.root_attachment:
        ctx.expect_status(dave.request("DELETE", f"/sessions/{leaf}/attachments/{chain.root_attachment}"), 409, "attachment-inherited", "DEL-STABLE-001")
    after = {"dave": snapshot(dave), "bob": snapshot(bob)}
    ctx.expect(after == before, "a deleted ancestor changed what its descendant reads", "DEL-DESCENDANTS-001")
    ctx.expect_status(dave.get(f"/sessions/{middle}"), 404, "not-found", "DEL-SOFT-001")


@check("DEL-PURGE-001", title="Purge removes a session without descendants, and frees its id", needs=("sharing",))
def purge(ctx: CheckContext) -> None:
    alice, carol = ctx.principals("owner", "reader")
    sid = ctx.create_session()["session_id"]
    attachment = turn_with_attachment(ctx, alice, sid, ctx.has("attachments"))
    child = ctx.fork_ok(sid)["session"]["session_id"]
    grant(ctx, alice, sid, carol)
    ctx.expect_status(carol.post(f"/sessions/{sid}/purge"), 403, "forbidden", "DEL-PURGE-001")
    ctx.expect_status(alice.post(f"/sessions/{sid}/purge"), 409, "live-descendants", "DEL-PURGE-001")
    ctx.expect_status(alice.request("DELETE", f"/sessions/{child}"), 204, None, "DEL-SOFT-001")
    ctx.expect_status(alice.post(f"/sessions/{sid}/purge"), 409, "live-descendants", "DEL-PURGE-001")
    ctx.expect_status(alice.get(f"/sessions/{sid}"), 200, None, "DEL-PURGE-001")
    ctx.expect_status(alice.post(f"/sessions/{child}/purge"), 204, None, "DEL-PURGE-001")
    ctx.expect_status(alice.post(f"/sessions/{sid}/purge"), 204, None, "DEL-PURGE-001")
    for client in (alice, carol):
        ctx.expect_status(client.get(f"/sessions/{sid}"), 404, "not-found", "DEL-PURGE-001")
    ctx.expect_status(alice.post(f"/sessions/{sid}/purge"), 404, "not-found", "DEL-PURGE-001")
    reborn = alice.post("/sessions", json={"session_id": sid})
    ctx.expect_status(reborn, 201, None, "DEL-PURGE-001")
    ctx.expect(reborn.json()["lineage"] is None, "the purged id names a new root", "DEL-PURGE-001")
    ctx.expect(ctx.walk(sid) == [], "the new session inherited the purged session's records", "DEL-PURGE-001")
    if attachment:
        ctx.expect_status(fetch(alice, sid, attachment), 404, "not-found", "DEL-PURGE-001")
    ctx.expect_status(carol.get(f"/sessions/{sid}"), 404, "not-found", "DEL-PURGE-001")


# ---------------------------------------------------------------- listings
@check("LIST-SESSIONS-001", title="The session listing holds exactly the readable sessions, once each, in id order", needs=("sharing",))
def list_sessions(ctx: CheckContext) -> None:
    alice, carol, dave = ctx.principals("owner", "reader", "writer")
    made = [ctx.create_session(alice, session_id=ctx.new_id("l"))["session_id"] for _ in range(5)]
    turn_with_attachment(ctx, alice, made[0], False)
    fork = ctx.fork_ok(made[0])["session"]
    made.append(fork["session_id"])
    expected = {made[0]: "reader", made[2]: "writer", made[4]: "reader", fork["session_id"]: "writer"}
    for sid, role in expected.items():
        grant(ctx, alice, sid, carol, role)
    grant(ctx, alice, made[3], carol)
    revoke(ctx, alice, made[3], carol)
    grant(ctx, alice, made[1], carol)
    ctx.expect_status(alice.request("DELETE", f"/sessions/{made[1]}"), 204, None, "DEL-SOFT-001")
    own = ctx.create_session(carol)["session_id"]
    items = walk_listing(ctx, carol, "/sessions", 2, "LIST-SESSIONS-001")
    ids = [item["session"]["session_id"] for item in items]
    ctx.expect(ids == sorted(ids) and len(ids) == len(set(ids)), "the listing is not in ascending id order, once each", "LIST-SESSIONS-001")
    got = {item["session"]["session_id"]: item["access"] for item in items if item["session"]["session_id"] in made}
    ctx.expect(got == expected, f"carol's listing gives {got}, expected {expected}", "LIST-SESSIONS-001")
    ctx.expect(dict((i["session"]["session_id"], i["access"]) for i in items).get(own) == "owner", "an own session", "LIST-SESSIONS-001")
    listed_fork = next(item["session"] for item in items if item["session"]["session_id"] == fork["session_id"])
    ctx.expect(listed_fork == fork, f"the listed fork {listed_fork} differs from the session {fork}", "LIST-SESSIONS-001")
    for limit in (0, ctx.limits["max_page_size"] + 1):
        ctx.expect_status(carol.get("/sessions", params={"limit": limit}), 422, "invalid-request", "LIST-SESSIONS-001")
    cursor = carol.get("/sessions", params={"limit": 1}).json()["next_cursor"]
    ctx.expect_status(dave.get("/sessions", params={"cursor": cursor}), 400, "invalid-cursor", "LIST-SESSIONS-001")
    ctx.expect_status(carol.get(f"/sessions/{made[0]}/descendants", params={"cursor": cursor}), 400, "invalid-cursor", "LIST-DESCENDANTS-001")
    ctx.expect_status(carol.get("/sessions", params={"cursor": "bm90LWEtY3Vyc29y"}), 400, "invalid-cursor", "LIST-SESSIONS-001")


@check("LIST-DESCENDANTS-001", title="The branch family lists the readable, live descendants, once each, in id order", needs=("sharing",))
def list_descendants(ctx: CheckContext) -> None:
    alice, bob, carol = ctx.principals("owner", "stranger", "reader")
    root, _, _ = ctx.conversation(1)
    rid = root["session_id"]
    grant(ctx, alice, rid, carol)
    first = ctx.fork_ok(rid)["session"]["session_id"]
    second = ctx.fork_ok(rid)["session"]["session_id"]
    grandchild = ctx.fork_ok(first)["session"]["session_id"]
    carols = ctx.fork_ok(rid, client=carol)["session"]["session_id"]
    gone = ctx.fork_ok(second)["session"]["session_id"]
    ctx.expect_status(alice.request("DELETE", f"/sessions/{gone}"), 204, None, "DEL-SOFT-001")
    items = walk_listing(ctx, alice, f"/sessions/{rid}/descendants", 1, "LIST-DESCENDANTS-001")
    ids = [item["session"]["session_id"] for item in items]
    expected = sorted([first, second, grandchild])
    ctx.expect(ids == expected, f"alice's descendants of the root: {ids}, expected {expected}", "LIST-DESCENDANTS-001")
    ctx.expect(all(item["access"] == "owner" for item in items), f"access {[i['access'] for i in items]}", "LIST-DESCENDANTS-001")
    depth = {item["session"]["session_id"]: item["session"]["lineage"]["depth"] for item in items}
    ctx.expect(depth[grandchild] == 2 and depth[first] == 1, f"lineage summaries give depths {depth}", "LIST-DESCENDANTS-001")
    theirs = [i["session"]["session_id"] for i in walk_listing(ctx, carol, f"/sessions/{rid}/descendants", 2, "LIST-DESCENDANTS-001")]
    ctx.expect(theirs == [carols], f"carol's descendants of the root: {theirs}, expected only her own fork", "LIST-DESCENDANTS-001")
    grant(ctx, alice, grandchild, carol)
    theirs = [i["session"]["session_id"] for i in walk_listing(ctx, carol, f"/sessions/{rid}/descendants", 2, "LIST-DESCENDANTS-001")]
    ctx.expect(theirs == sorted([carols, grandchild]), f"after a grant on the grandchild: {theirs}", "LIST-DESCENDANTS-001")
    ctx.expect_status(bob.get(f"/sessions/{rid}/descendants"), 404, "not-found", "LIST-DESCENDANTS-001")
    ctx.expect_status(alice.get(f"/sessions/{rid}/descendants", params={"limit": 0}), 422, "invalid-request", "LIST-DESCENDANTS-001")
    cursor = alice.get(f"/sessions/{rid}/descendants", params={"limit": 1}).json()["next_cursor"]
    ctx.expect_status(alice.get(f"/sessions/{first}/descendants", params={"cursor": cursor}), 400, "invalid-cursor", "LIST-DESCENDANTS-001")
