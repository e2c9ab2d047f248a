"""Chapter: effective transcript (order, provenance, pagination, cursors)."""

from __future__ import annotations

import base64
import json
from typing import Any

from conformance.context import CheckContext
from conformance.model import LineageModel
from conformance.registry import check

RECORD_FIELDS = ("record_id", "session_id", "turn_id", "index", "type", "content")


def _strip(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(json.dumps(record[key], sort_keys=True) for key in RECORD_FIELDS) for record in records]


def build_mixed_chain(ctx: CheckContext, model: LineageModel) -> list[str]:
    """A chain of depth 5 whose cuts use every mode, including a cut inside an ancestor."""

    def turn(sid: str, role: str, records: int) -> dict[str, Any]:
        started, written = ctx.run_turn(sid, role, records)
        model.start_turn(sid, started["turn_id"], role)
        model.append(sid, started["turn_id"], written)
        model.finish(sid, started["turn_id"], "completed")
        return started

    def fork(source: str, cut: dict[str, Any]) -> str:
        child = ctx.fork_ok(source, cut)["session"]["session_id"]
        inherited = model.cut_prefix(source, cut)
        assert isinstance(inherited, list)
        model.fork(source, child, inherited)
        return child

    root = ctx.create_session()["session_id"]
    model.create(root)
    r0, r1 = turn(root, "user", 2), turn(root, "assistant", 3)
    turn(root, "user", 1)
    c1 = fork(root, {"mode": "through", "turn_id": r1["turn_id"]})
    c1a = turn(c1, "user", 2)
    turn(c1, "assistant", 1)
    c2 = fork(c1, {"mode": "before", "turn_id": c1a["turn_id"]})
    turn(c2, "user", 1)
    turn(c2, "assistant", 2)
    c3 = fork(c2, {"mode": "latest"})
    turn(c3, "user", 2)
    c4 = fork(c3, {"mode": "through", "turn_id": r0["turn_id"]})  # a cut inside the root
    turn(c4, "assistant", 3)
    c5 = fork(c4, {"mode": "latest"})
    turn(c5, "user", 1)
    return [root, c1, c2, c3, c4, c5]


@check("XS-EFFECTIVE-001", "XS-PROVENANCE-001", title="Order and provenance over a chain of depth 5")
def effective_order_depth_5(ctx: CheckContext) -> None:
    model = LineageModel()
    chain = build_mixed_chain(ctx, model)
    for sid in chain:
        got = ctx.walk(sid)
        expected = model.transcript(sid)
        def positions(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
            return [(r["turn_id"], r["index"], json.dumps(r["content"], sort_keys=True)) for r in records]

        ctx.expect(
            positions(got) == positions(expected),
            f"transcript of {sid}: {ctx.keys(got)}, expected {ctx.keys(expected)}",
            "XS-EFFECTIVE-001",
        )
        ctx.expect(_strip(got) == _strip(expected), f"records of {sid} were rewritten on read", "XS-PROVENANCE-001")


@check("XS-ROOT-001", title="A root's transcript is its own records; /records is physical only")
def root_and_physical(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(3)
    sid = source["session_id"]
    ctx.expect(ctx.walk(sid) == records, "a root's transcript differs from its records")
    ctx.expect(ctx.walk(sid, "records") == records, "a root's /records differ from what it wrote")
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    _, own = ctx.run_turn(child, "user", 2)
    ctx.expect(ctx.walk(child, "records") == own, "a child's /records must hold only its own records")


@check("XS-PAGE-001", title="Walking pages yields every record once, in order, within the limit")
def pagination_walk(ctx: CheckContext) -> None:
    ids = ctx.chain(3, turns_per_session=2, records_per_turn=3)
    sid = ids[-1]
    everything = ctx.walk(sid, limit=ctx.limits["max_page_size"])
    ctx.expect(len(everything) == 24, f"expected 24 records across the chain, got {len(everything)}")
    for limit in (1, 2, 5, 7, 23, 24, 25):
        sizes: list[int] = []
        walked = ctx.walk(sid, limit=limit, on_page=lambda page: sizes.append(len(page.json()["records"])))
        ctx.expect(walked == everything, f"limit {limit}: pages differ from the whole transcript")
        ctx.expect(max(sizes) <= limit, f"limit {limit}: a page held {max(sizes)} records")
    default = ctx.limits["default_page_size"]
    if default < 24:
        page = ctx.alice.get(f"/sessions/{sid}/transcript").json()
        ctx.expect(len(page["records"]) == default and page["has_more"], f"default page size {default} not applied")


@check("XS-PAGE-LIMIT-001", title="A page size outside 1..max_page_size is refused")
def page_limit_bounds(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    for limit in (0, ctx.limits["max_page_size"] + 1):
        for kind in ("transcript", "records"):
            response = ctx.alice.get(f"/sessions/{sid}/{kind}", params={"limit": limit})
            ctx.expect_status(response, 422, "invalid-request")


@check("XS-PAGE-GROWTH-001", title="Cursors stay valid while the session grows")
def cursor_survives_growth(ctx: CheckContext) -> None:
    source, _, inherited = ctx.conversation(2, records_per_turn=2)
    child = ctx.fork_ok(source["session_id"], {"mode": "latest"})["session"]["session_id"]
    _, own = ctx.run_turn(child, "user", 2)
    seen: list[dict[str, Any]] = []
    page = ctx.alice.get(f"/sessions/{child}/transcript", params={"limit": 3}).json()
    seen += page["records"]
    _, grown = ctx.run_turn(child, "assistant", 3)  # the session grows between pages
    ctx.run_turn(source["session_id"], "user", 2)  # so does the parent, after the cut
    cursor = page["next_cursor"]
    while True:
        page = ctx.alice.get(f"/sessions/{child}/transcript", params={"limit": 3, "cursor": cursor}).json()
        seen += page["records"]
        cursor = page["next_cursor"]
        if not page["has_more"]:
            break
    ctx.expect(seen == inherited + own + grown, f"records lost or repeated: {ctx.keys(seen)}")
    _, later = ctx.run_turn(child, "user", 2)  # growth after the walk reached the end
    page = ctx.alice.get(f"/sessions/{child}/transcript", params={"limit": 10, "cursor": cursor}).json()
    ctx.expect(page["records"] == later, f"after the end, the cursor returned {ctx.keys(page['records'])}")


@check("XS-CURSOR-INVALID-001", title="Cursors the server did not issue for this session are refused")
def invalid_cursor(ctx: CheckContext) -> None:
    a, _, _ = ctx.conversation(2)
    b, _, _ = ctx.conversation(2)
    sid = a["session_id"]
    foreign = ctx.alice.get(f"/sessions/{b['session_id']}/transcript", params={"limit": 1}).json()["next_cursor"]
    valid = ctx.alice.get(f"/sessions/{sid}/transcript", params={"limit": 1}).json()["next_cursor"]
    forged = base64.urlsafe_b64encode(json.dumps({"session": "x", "offset": 1}).encode()).decode()
    for bad in ["!!!", "not-a-cursor", forged, foreign, valid[: len(valid) // 2] + "A", "c" * 5000]:
        response = ctx.alice.get(f"/sessions/{sid}/transcript", params={"cursor": bad})
        ctx.expect_status(response, 400, "invalid-cursor")
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    records_cursor = ctx.alice.get(f"/sessions/{sid}/records", params={"limit": 1}).json()["next_cursor"]
    for bad, where in ((valid, child), (records_cursor, sid)):  # the parent's cursor; a /records cursor
        response = ctx.alice.get(f"/sessions/{where}/transcript", params={"cursor": bad})
        ctx.expect_status(response, 400, "invalid-cursor")
