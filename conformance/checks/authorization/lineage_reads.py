"""Reads through a lineage: what a session inherits needs a role on every ancestor, revoked at once."""

from __future__ import annotations

from conformance.checks.authorization.common import fetch, grant, listed_access, revoke, three_owners
from conformance.context import CheckContext
from conformance.matrix import POSITIONS
from conformance.registry import check


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
