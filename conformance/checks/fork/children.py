"""The child a fork creates: isolated from later writes, its header, its id, its place in the lineage."""

from __future__ import annotations

from conformance.checks.fork.common import absent
from conformance.context import CheckContext
from conformance.registry import check


@check("FORK-SNAPSHOT-001", title="Later writes to parent or child never cross the fork")
def snapshot_isolation(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(2)
    sid = source["session_id"]
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    _, parent_late = ctx.run_turn(sid, "user", 3)
    _, child_own = ctx.run_turn(child, "user", 2)
    ctx.expect(ctx.walk(child) == records + child_own, "the child's transcript changed after writes to the parent")
    ctx.expect(ctx.walk(sid) == records + parent_late, "the parent's transcript shows the child's records")
    grandchild = ctx.fork_ok(child, {"mode": "latest"})["session"]["session_id"]
    ctx.run_turn(child, "assistant", 1)
    ctx.run_turn(sid, "assistant", 1)
    ctx.expect(ctx.walk(grandchild) == records + child_own, "a grandchild saw writes made after its fork")


@check("FORK-HEADER-001", title="Header fields: absent copies, null clears, a value sets")
def header_three_state(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1, name="Source name", description="Source description")
    sid = source["session_id"]
    cases = [
        (None, ("Source name", "Source description")),
        ({}, ("Source name", "Source description")),
        ({"name": None}, (None, "Source description")),
        ({"name": "Renamed"}, ("Renamed", "Source description")),
        ({"name": "Both", "description": None}, ("Both", None)),
        ({"description": "New description"}, ("Source name", "New description")),
        ({"name": ""}, ("", "Source description")),  # the empty string is a string: it sets
        ({"name": "", "description": ""}, ("", "")),
    ]
    for header, (name, description) in cases:
        kwargs = {} if header is None else {"header": header}
        child = ctx.fork_ok(sid, {"mode": "latest"}, **kwargs)["session"]
        got = (child["name"], child["description"])
        ctx.expect(got == (name, description), f"header {header}: got {got}, expected {(name, description)}")
        stored = ctx.alice.get(f"/sessions/{child['session_id']}").json()
        ctx.expect((stored["name"], stored["description"]) == got, f"header {header}: GET shows {stored}")


@check("FORK-TARGET-001", title="A client-chosen child id: same fork replays, anything else conflicts")
def target_session_id(ctx: CheckContext) -> None:
    source, turns, _ = ctx.conversation(2)
    sid = source["session_id"]
    target = ctx.new_id("child")
    cut = {"mode": "through", "turn_id": turns[0]["turn_id"]}
    first = ctx.fork(sid, cut, target=target)
    ctx.expect_status(first, 201)
    ctx.expect(first.json()["session"]["session_id"] == target, f"asked for child id {target}")
    again = ctx.fork(sid, cut, target=target)
    ctx.expect_status(again, 201)
    ctx.expect(again.json() == first.json(), "a repeated fork to the same target returned a different child")
    ctx.expect(again.header("Idempotency-Replayed") == "true", "a repeated fork must say Idempotency-Replayed: true")
    different = ctx.fork(sid, {"mode": "latest"}, target=target)
    ctx.expect_status(different, 409, "target-conflict")
    unrelated = ctx.create_session()["session_id"]
    taken = ctx.fork(sid, cut, target=unrelated)
    ctx.expect_status(taken, 409, "target-conflict")
    ctx.expect(ctx.alice.get(f"/sessions/{unrelated}").json()["lineage"] is None, "a refused fork changed the unrelated session")


@check("FORK-CYCLE-001", title="A session can never become its own ancestor")
def no_cycles(ctx: CheckContext) -> None:
    ids = ctx.chain(2)
    for source, target in ((ids[0], ids[0]), (ids[2], ids[2]), (ids[2], ids[0]), (ids[2], ids[1])):
        response = ctx.fork(source, {"mode": "latest"}, target=target)
        ctx.expect_status(response, 409, "target-conflict")
    lineage = ctx.alice.get(f"/sessions/{ids[0]}/lineage").json()
    ctx.expect(lineage["ancestors"] == [] and lineage["depth"] == 0, f"the root gained ancestors: {lineage}")


@check("FORK-DEPTH-001", "FORK-ATOMIC-001", title="Forks up to the maximum depth succeed; one more is refused")
def depth_limit(ctx: CheckContext) -> None:
    maximum = ctx.limits["max_lineage_depth"]
    ids = ctx.chain(maximum, records_per_turn=1)
    deepest = ctx.alice.get(f"/sessions/{ids[-1]}").json()
    ctx.expect(deepest["lineage"]["depth"] == maximum, f"expected depth {maximum}: {deepest['lineage']}", "FORK-DEPTH-001")
    target = ctx.new_id("too-deep")
    response = ctx.fork(ids[-1], {"mode": "latest"}, target=target)
    ctx.expect_status(response, 422, "depth-exceeded", "FORK-DEPTH-001")
    absent(ctx, target, "a fork beyond the maximum depth was refused")


@check("FORK-SOURCE-MISSING-001", "FORK-ATOMIC-001", title="Forking a session that does not exist is not found, and creates nothing")
def unknown_source(ctx: CheckContext) -> None:
    target = ctx.new_id("never")
    response = ctx.fork(ctx.new_id("missing"), {"mode": "latest"}, target=target)
    ctx.expect_status(response, 404, "not-found", "FORK-SOURCE-MISSING-001")
    absent(ctx, target, "a fork of a missing source was refused")
