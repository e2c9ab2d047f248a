"""Chapter: lineage reads."""

from __future__ import annotations

from conformance.context import CheckContext
from conformance.registry import check


@check("LIN-READ-001", title="Lineage lists ancestors from the root with depths and inherited counts")
def lineage_read(ctx: CheckContext) -> None:
    root, turns, _ = ctx.conversation(3)
    rid = root["session_id"]
    read = ctx.ok(ctx.alice.get(f"/sessions/{rid}/lineage"), 200)
    root_expected = {"root_session_id": rid, "depth": 0, "ancestors": []}
    ctx.expect(ctx.known(read, root_expected) == root_expected, f"root lineage {read}")
    child = ctx.fork_ok(rid, {"mode": "through", "turn_id": turns[1]["turn_id"]})["session"]["session_id"]
    ctx.run_turn(child, "user", 1)
    grandchild = ctx.fork_ok(child, {"mode": "latest"})["session"]["session_id"]
    read = ctx.ok(ctx.alice.get(f"/sessions/{grandchild}/lineage"), 200)
    expected = {
        "root_session_id": rid,
        "depth": 2,
        "ancestors": [
            {"session_id": rid, "depth": 0, "inherited_turn_count": 2},
            {"session_id": child, "depth": 1, "inherited_turn_count": 3},
        ],
    }
    ctx.expect(ctx.known(read, expected) == expected, f"lineage {read}, expected {expected}")


@check("LIN-SUMMARY-001", title="A session's lineage summary matches its fork and never changes")
def lineage_summary(ctx: CheckContext) -> None:
    root, _, _ = ctx.conversation(1)
    forked = ctx.fork_ok(root["session_id"], {"mode": "latest"})
    sid = forked["session"]["session_id"]
    ctx.expect(ctx.alice.get(f"/sessions/{sid}").json()["lineage"] == forked["lineage"], "GET lineage differs from the fork answer")
    ctx.run_turn(root["session_id"], "user", 2)
    ctx.run_turn(sid, "user", 1)
    ctx.fork_ok(sid, {"mode": "latest"})
    ctx.expect(ctx.alice.get(f"/sessions/{sid}").json()["lineage"] == forked["lineage"], "the lineage changed after later writes")
