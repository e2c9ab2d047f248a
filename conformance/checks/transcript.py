"""Chapter: effective transcript (order, provenance, pagination, cursors)."""

from __future__ import annotations

import base64
import json
from typing import Any

from conformance.checks.refusals import expect_refused
from conformance.context import CheckContext
from conformance.model import LineageModel
from conformance.registry import check, setup_step

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


PAGED_RECORDS_CAP = 400  # a transcript longer than the largest page the walk uses, up to this size


@check("XS-PAGE-001", title="Walking pages yields every record once, in order, within the limit")
def pagination_walk(ctx: CheckContext) -> None:
    largest = ctx.limits["max_page_size"]
    default = ctx.limits["default_page_size"]
    # One record more than the largest page (capped), over a chain of 4 sessions of 2 turns each.
    total = min(max(largest, default), PAGED_RECORDS_CAP) + 1
    per_turn = -(-total // 8)
    ids = ctx.chain(3, turns_per_session=2, records_per_turn=per_turn)
    sid = ids[-1]
    everything = ctx.walk(sid, limit=largest)
    ctx.expect(len(everything) == 8 * per_turn, f"expected {8 * per_turn} records across the chain, got {len(everything)}")
    limits = sorted({1, 2, min(7, largest), default, largest - 1, largest} - {0})
    for limit in limits:
        sizes: list[int] = []
        walked = ctx.walk(sid, limit=limit, on_page=lambda page: sizes.append(len(page.json()["records"])))
        ctx.expect(walked == everything, f"limit {limit}: the pages differ from the whole transcript")
        ctx.expect(max(sizes) <= limit, f"limit {limit}: a page held {max(sizes)} records")
    sizes = []
    walked = ctx.walk(sid, on_page=lambda page: sizes.append(len(page.json()["records"])))
    ctx.expect(walked == everything, "without a limit, the pages differ from the whole transcript")
    ctx.expect(
        max(sizes) <= default,
        f"without a limit a page held {max(sizes)} records; default_page_size is {default}",
    )
    if len(everything) > default:
        first = ctx.ok(ctx.alice.get(f"/sessions/{sid}/transcript"), 200)
        ctx.expect(first["has_more"] is True, f"the first default page of {len(everything)} records has has_more false")


@check("XS-PAGE-LIMIT-001", title="A page size outside 1..max_page_size is refused; 1 and max_page_size are accepted")
def page_limit_bounds(ctx: CheckContext) -> None:
    largest = ctx.limits["max_page_size"]
    source, _, records = ctx.conversation(1, records_per_turn=2)
    sid = source["session_id"]
    for kind in ("transcript", "records"):
        ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/{kind}", params={"limit": 0}), 422, "invalid-request")
        expect_refused(ctx, ctx.alice.get(f"/sessions/{sid}/{kind}", params={"limit": largest + 1}), "page-size-exceeded")
        for limit in (1, largest):
            page = ctx.ok(ctx.alice.get(f"/sessions/{sid}/{kind}", params={"limit": limit}), 200)
            ctx.expect(
                ctx.keys(page["records"]) == ctx.keys(records[:limit]),
                f"GET /sessions/{sid}/{kind}?limit={limit} returned {ctx.keys(page['records'])}",
            )


@check("XS-PAGE-GROWTH-001", title="Cursors stay valid while the session grows")
def cursor_survives_growth(ctx: CheckContext) -> None:
    source, _, inherited = ctx.conversation(2, records_per_turn=2)
    child = ctx.fork_ok(source["session_id"], {"mode": "latest"})["session"]["session_id"]
    _, own = ctx.run_turn(child, "user", 2)
    seen: list[dict[str, Any]] = []
    page = ctx.ok(ctx.alice.get(f"/sessions/{child}/transcript", params={"limit": 3}), 200)
    seen += page["records"]
    _, grown = ctx.run_turn(child, "assistant", 3)  # the session grows between pages
    ctx.run_turn(source["session_id"], "user", 2)  # so does the parent, after the cut
    cursor = page["next_cursor"]
    while True:
        page = ctx.ok(ctx.alice.get(f"/sessions/{child}/transcript", params={"limit": 3, "cursor": cursor}), 200)
        seen += page["records"]
        cursor = page["next_cursor"]
        if not page["has_more"]:
            break
    ctx.expect(seen == inherited + own + grown, f"records lost or repeated: {ctx.keys(seen)}")
    _, later = ctx.run_turn(child, "user", 2)  # growth after the walk reached the end
    page = ctx.ok(ctx.alice.get(f"/sessions/{child}/transcript", params={"limit": 10, "cursor": cursor}), 200)
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


@setup_step("XS-PAGE-001")
def _first_cursor(ctx: CheckContext, session_id: str, kind: str) -> str:
    response = ctx.alice.get(f"/sessions/{session_id}/{kind}", params={"limit": 1})
    ctx.expect_status(response, 200, None, "XS-PAGE-001")
    cursor = response.json().get("next_cursor")
    ctx.expect(isinstance(cursor, str), f"a page of {kind} with records has next_cursor {cursor!r}", "XS-PAGE-001")
    return cursor


@check("XS-CURSOR-SCOPE-001", title="A cursor belongs to one listing: one kind of read of one session")
def cursor_scope(ctx: CheckContext) -> None:
    a, _, _ = ctx.conversation(2)
    sid = a["session_id"]
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    ctx.run_turn(child, "user", 2)
    transcript_a, records_a = _first_cursor(ctx, sid, "transcript"), _first_cursor(ctx, sid, "records")
    transcript_child = _first_cursor(ctx, child, "transcript")
    cases = [
        (transcript_a, child, "transcript", "the parent's transcript cursor on the child's transcript"),
        (transcript_child, sid, "transcript", "the child's transcript cursor on the parent's transcript"),
        (records_a, sid, "transcript", "a records cursor on the same session's transcript"),
        (transcript_a, sid, "records", "a transcript cursor on the same session's records"),
        (records_a, child, "records", "the parent's records cursor on the child's records"),
    ]
    for cursor, where, kind, what in cases:
        response = ctx.alice.get(f"/sessions/{where}/{kind}", params={"cursor": cursor})
        ctx.expect(response.status == 400, f"{what}: answered {response.status}, expected 400 invalid-cursor")
        ctx.expect_status(response, 400, "invalid-cursor")
    for cursor, kind in ((transcript_a, "transcript"), (records_a, "records")):  # in its own listing it works
        ctx.expect_status(ctx.alice.get(f"/sessions/{sid}/{kind}", params={"cursor": cursor}), 200)


@check("XS-PAGE-EMPTY-001", title="An empty page ends the walk and hands back the cursor, so a client can poll")
def empty_page(ctx: CheckContext) -> None:
    empty = ctx.create_session()["session_id"]
    for kind in ("transcript", "records"):
        response = ctx.alice.get(f"/sessions/{empty}/{kind}")
        ctx.expect_status(response, 200)
        page = response.json()
        ctx.expect(
            (page["records"], page["has_more"], page["next_cursor"]) == ([], False, None),
            f"{kind} of a session without records: records {len(page['records'])}, has_more "
            f"{page['has_more']}, next_cursor {page['next_cursor']!r}; expected [], false, null",
        )
    source, _, written = ctx.conversation(1, records_per_turn=2)
    sid = source["session_id"]
    for kind in ("transcript", "records"):
        response = ctx.alice.get(f"/sessions/{sid}/{kind}", params={"limit": len(written)})
        ctx.expect_status(response, 200)
        cursor = response.json()["next_cursor"]
        at_end = ctx.alice.get(f"/sessions/{sid}/{kind}", params={"cursor": cursor})
        ctx.expect_status(at_end, 200)
        page = at_end.json()
        ctx.expect(
            page["records"] == [] and page["has_more"] is False and page["next_cursor"] == cursor,
            f"{kind} read at its end: records {len(page['records'])}, has_more {page['has_more']}, "
            f"next_cursor {'the same cursor' if page['next_cursor'] == cursor else repr(page['next_cursor'])}; "
            "expected no records, false and the request's cursor",
        )
        ctx.expect(ctx.keys(page["records"]) == [], "records appeared at the end")
    _, later = ctx.run_turn(sid, "assistant", 1)
    for kind in ("transcript", "records"):
        cursor = ctx.alice.get(f"/sessions/{sid}/{kind}", params={"limit": len(written)}).json()["next_cursor"]
        polled = ctx.alice.get(f"/sessions/{sid}/{kind}", params={"cursor": cursor}).json()
        ctx.expect(ctx.keys(polled["records"]) == ctx.keys(later), f"polling {kind} after growth returned {ctx.keys(polled['records'])}")
