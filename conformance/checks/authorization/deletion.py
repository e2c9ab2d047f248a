"""Deletion: soft delete, deleted ancestors serving their descendants, and purge."""

from __future__ import annotations

from typing import Any

from conformance.checks.authorization.common import delete_session, fetch, grant, listed_access, three_owners, turn_with_attachment
from conformance.client import ApiClient, describe
from conformance.context import CheckContext
from conformance.matrix import POSITIONS
from conformance.registry import check


@check("DEL-SOFT-001", "DEL-FORK-001", title="A deleted session is gone for everyone, its owner included, and cannot be forked", needs=("sharing",))
def soft_delete(ctx: CheckContext) -> None:
    alice, carol = ctx.principals("owner", "reader")
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    parent = ctx.create_session()["session_id"]
    turn_with_attachment(ctx, alice, parent, False)
    grant(ctx, alice, sid, carol)
    # A grantee's delete is refused by AUTH-ROLES-001 (the authorization matrix checks it), not by this rule.
    ctx.expect_status(alice.request("DELETE", f"/sessions/{sid}"), 204, None, "DEL-SOFT-001")
    for client in (alice, carol):
        for path in ("", "/transcript", "/records", "/lineage", "/descendants"):
            ctx.expect_status(client.get(f"/sessions/{sid}{path}"), 404, "not-found", "DEL-SOFT-001")
        ctx.expect(listed_access(ctx, client, sid) is None, "a deleted session is still listed", "DEL-SOFT-001")
    ctx.expect_status(alice.post(f"/sessions/{sid}/turns", json={"role": "user"}), 404, "not-found", "DEL-SOFT-001")
    ctx.expect_status(alice.request("DELETE", f"/sessions/{sid}"), 204, None, "DEL-SOFT-001")
    ctx.expect_status(carol.request("DELETE", f"/sessions/{sid}"), 404, "not-found", "DEL-SOFT-001")
    # The owner's revocation is excepted from answering as an unknown id; what it answers (204) is
    # AUTH-REVOKE-001's, checked after a delete by `orders.access_under_every_order`.
    revoked = alice.request("DELETE", f"/sessions/{sid}/grants/{ctx.principal_id(carol)}")
    ctx.expect(revoked.status != 404, f"{describe(revoked.exchange)}: the owner's revocation of a grant on the session "
               "it deleted answers as an unknown id, which DEL-SOFT-001 excepts it from", "DEL-SOFT-001")
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
    delete_session(ctx, alice, root)
    delete_session(ctx, carol, middle)
    ctx.expect_status(alice.post(f"/sessions/{root}/purge"), 409, "live-descendants", "DEL-STABLE-001")
    if chain.root_attachment:
        ctx.expect_status(dave.request("DELETE", f"/sessions/{leaf}/attachments/{chain.root_attachment}"), 409, "attachment-inherited", "DEL-STABLE-001")
    after = {"dave": snapshot(dave), "bob": snapshot(bob)}
    ctx.expect(after == before, "a deleted ancestor changed what its descendant reads", "DEL-DESCENDANTS-001")


@check("DEL-PURGE-001", title="Purge removes a session without descendants, and frees its id", needs=("sharing",))
def purge(ctx: CheckContext) -> None:
    alice, carol = ctx.principals("owner", "reader")
    sid = ctx.create_session()["session_id"]
    attachment = turn_with_attachment(ctx, alice, sid, ctx.has("attachments"))
    child = ctx.fork_ok(sid)["session"]["session_id"]
    grant(ctx, alice, sid, carol)
    ctx.expect_status(carol.post(f"/sessions/{sid}/purge"), 403, "forbidden", "DEL-PURGE-001")
    ctx.expect_status(alice.post(f"/sessions/{sid}/purge"), 409, "live-descendants", "DEL-PURGE-001")
    delete_session(ctx, alice, child)
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
