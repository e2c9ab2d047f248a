"""Cut points: through, before and at the latest turn, own or inherited, and cuts that are refused."""

from __future__ import annotations

from typing import Any

from conformance.checks.fork.common import absent
from conformance.context import CheckContext
from conformance.registry import check


@check("FORK-CREATE-001", "FORK-NO-COPY-001", title="A fork creates a child that inherits without copying")
def fork_creates_child(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(3)
    result = ctx.fork_ok(source["session_id"], {"mode": "latest"})
    child, lineage = result["session"], result["lineage"]
    expected = {
        "root_session_id": source["session_id"],
        "parent_session_id": source["session_id"],
        "inherited_turn_count": 3,
        "depth": 1,
    }
    ctx.expect(ctx.known(lineage, expected) == expected, f"lineage {lineage}, expected {expected}", "FORK-CREATE-001")
    ctx.expect(child["lineage"] == lineage, "the child session must carry its lineage", "FORK-CREATE-001")
    ctx.expect(ctx.walk(child["session_id"], "records") == [], "a fork wrote records into the child", "FORK-NO-COPY-001")
    inherited = ctx.walk(child["session_id"])
    ctx.expect(inherited == records, "the child's transcript is not the parent's records, ids unchanged", "FORK-NO-COPY-001")
    grandchild = ctx.fork_ok(child["session_id"], {"mode": "latest"})["lineage"]
    ctx.expect(
        grandchild["root_session_id"] == source["session_id"] and grandchild["depth"] == 2,
        f"grandchild lineage {grandchild}",
        "FORK-CREATE-001",
    )


def _cut_case(ctx: CheckContext, source_id: str, cut: dict[str, Any], expected_records: list[dict[str, Any]], turns: int, requirement: str) -> None:
    response = ctx.fork(source_id, cut)
    ctx.expect_status(response, 201, None, requirement)
    result = response.json()
    got = result["lineage"]["inherited_turn_count"]
    ctx.expect(got == turns, f"cut {cut}: inherited_turn_count {got}, expected {turns}", requirement)
    transcript = ctx.walk(result["session"]["session_id"])
    ctx.expect(
        ctx.keys(transcript) == ctx.keys(expected_records),
        f"cut {cut}: transcript {ctx.keys(transcript)}, expected {ctx.keys(expected_records)}",
        requirement,
    )


def _four_turns(ctx: CheckContext) -> tuple[str, list[dict[str, Any]], list[list[dict[str, Any]]]]:
    session = ctx.create_session()
    sid = session["session_id"]
    turns, per_turn = [], []
    for n, role in enumerate(["user", "assistant", "user", "assistant"]):
        turn, records = ctx.run_turn(sid, role, n + 1)
        turns.append(turn)
        per_turn.append(records)
    return sid, turns, per_turn


@check("FORK-CUT-THROUGH-001", title="Cut through a user or assistant turn, first or last, own or inherited")
def cut_through(ctx: CheckContext) -> None:
    sid, turns, per_turn = _four_turns(ctx)
    for position in (0, 1, 2, 3):  # first (user), assistant, user, last (assistant)
        prefix = [r for records in per_turn[: position + 1] for r in records]
        _cut_case(ctx, sid, {"mode": "through", "turn_id": turns[position]["turn_id"]}, prefix, position + 1, "FORK-CUT-THROUGH-001")
    # through a turn the source inherited: the cut lands in an ancestor
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    ctx.run_turn(child, "user", 1)
    prefix = [r for records in per_turn[:2] for r in records]
    _cut_case(ctx, child, {"mode": "through", "turn_id": turns[1]["turn_id"]}, prefix, 2, "FORK-CUT-THROUGH-001")


@check("FORK-CUT-BEFORE-001", title="Cut before a user or assistant turn, first or last, own or inherited")
def cut_before(ctx: CheckContext) -> None:
    sid, turns, per_turn = _four_turns(ctx)
    for position in (0, 1, 2, 3):
        prefix = [r for records in per_turn[:position] for r in records]
        _cut_case(ctx, sid, {"mode": "before", "turn_id": turns[position]["turn_id"]}, prefix, position, "FORK-CUT-BEFORE-001")
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    own, own_records = ctx.run_turn(child, "user", 1)
    everything = [r for records in per_turn for r in records]
    _cut_case(ctx, child, {"mode": "before", "turn_id": own["turn_id"]}, everything, 4, "FORK-CUT-BEFORE-001")
    _cut_case(ctx, child, {"mode": "before", "turn_id": turns[2]["turn_id"]}, everything[:3], 2, "FORK-CUT-BEFORE-001")


@check("FORK-CUT-LATEST-001", title="Cut at the latest finished turn leaves a running turn out")
def cut_latest(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(2)
    sid = source["session_id"]
    running = ctx.start_turn(sid, "user")
    ctx.append(sid, running["turn_id"], 2, label="in-flight")
    result = ctx.fork_ok(sid, {"mode": "latest"})
    ctx.expect(result["lineage"]["inherited_turn_count"] == 2, f"inherited {result['lineage']['inherited_turn_count']} turns, expected 2")
    child = result["session"]["session_id"]
    ctx.expect(ctx.walk(child) == records, "the running turn's records leaked into the fork")
    ctx.append(sid, running["turn_id"], 1, label="late")
    ctx.finish(sid, running["turn_id"])
    ctx.expect(ctx.walk(child) == records, "records of the turn running at fork time appeared later")


@check("FORK-CUT-UNKNOWN-001", "FORK-ATOMIC-001", title="A cut outside the source's effective transcript is refused, and creates nothing")
def cut_unknown_turn(ctx: CheckContext) -> None:
    sid, turns, _ = _four_turns(ctx)
    other, other_turns, _ = ctx.conversation(1)
    early = ctx.fork_ok(sid, {"mode": "through", "turn_id": turns[0]["turn_id"]})["session"]["session_id"]
    sibling = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    sibling_turn, _ = ctx.run_turn(sibling, "user", 1)
    cases = [
        (sid, ctx.new_id("no-such-turn"), "an unknown turn"),
        (sid, other_turns[0]["turn_id"], "a turn of another session"),
        (sid, sibling_turn["turn_id"], "a turn of a child session"),
        (early, turns[2]["turn_id"], "a turn of the parent after the cut"),
    ]
    for source_id, turn_id, what in cases:
        for mode in ("through", "before"):
            target = ctx.new_id("never")
            response = ctx.fork(source_id, {"mode": mode, "turn_id": turn_id}, target=target)
            ctx.expect_status(response, 422, "unknown-turn", "FORK-CUT-UNKNOWN-001")
            absent(ctx, target, f"cut {mode} {what} was refused")


@check("FORK-INCOMPLETE-001", "FORK-ATOMIC-001", title="No fork through a running turn")
def fork_through_running_turn(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    running = ctx.start_turn(sid, "assistant")
    ctx.append(sid, running["turn_id"], 2)
    target = ctx.new_id("never")
    response = ctx.fork(sid, {"mode": "through", "turn_id": running["turn_id"]}, target=target, key=ctx.new_id("key"))
    ctx.expect_status(response, 409, "turn-incomplete", "FORK-INCOMPLETE-001")
    absent(ctx, target, "a fork through a running turn was refused")
    before = ctx.fork(sid, {"mode": "before", "turn_id": running["turn_id"]})
    ctx.expect_status(before, 201, None, "FORK-INCOMPLETE-001")  # a cut before a running turn is allowed
    ctx.expect(before.json()["lineage"]["inherited_turn_count"] == 1, "a cut before the running turn inherits the finished turns", "FORK-INCOMPLETE-001")
