"""Principals and projects, and the roles an owner grants on one session."""

from __future__ import annotations

import secrets

from conformance.checks.authorization.common import grant, revoke
from conformance.checks.refusals import expect_refused
from conformance.context import CheckContext
from conformance.registry import check


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
    expect_refused(ctx, response, "grant-to-owner", "AUTH-GRANT-001")
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
