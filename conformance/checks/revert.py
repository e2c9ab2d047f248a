"""Chapter: revert (capability `revert`), with the session ETag it compares."""

from __future__ import annotations

from typing import Any

from conformance.checks.contention import rounds
from conformance.checks.diagnostics import CAPABILITY as QUERY_COUNT
from conformance.checks.diagnostics import TRANSCRIPT_PAGE_BOUND
from conformance.counts import round_trips
from conformance.checks.leases import held_lease, release_held
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check, setup_step

REVERT = "revert"
DEPTHS = (0, 1, 5)


@setup_step("REVERT-ETAG-001")
def etag_of(ctx: CheckContext, sid: str, client: ApiClient | None = None) -> str:
    response = (client or ctx.alice).get(f"/sessions/{sid}")
    ctx.expect_status(response, 200)
    tag = response.header("ETag")
    ctx.expect(tag is not None and tag.startswith('"') and tag.endswith('"') and len(tag) >= 2,
               f"GET /sessions/{sid} answered ETag {tag!r}; expected a strong entity tag", "REVERT-ETAG-001")
    return str(tag)


def revert(ctx: CheckContext, sid: str, turn_id: str, if_match: str | None, client: ApiClient | None = None,
           headers: dict[str, str] | None = None) -> Response:
    sent = dict(headers or {})
    if if_match is not None:
        sent["If-Match"] = if_match
    return (client or ctx.alice).post(f"/sessions/{sid}/revert", json={"turn_id": turn_id}, headers=sent or None)


@setup_step("REVERT-001")
def reverted(ctx: CheckContext, response: Response) -> dict[str, Any]:
    """The answer of a revert that must succeed (a set-up step of the checks that revert)."""
    ctx.expect_status(response, 200, None, "REVERT-001")
    return response.json()  # type: ignore[no-any-return]


def revert_ok(ctx: CheckContext, sid: str, turn_id: str, client: ApiClient | None = None) -> dict[str, Any]:
    return reverted(ctx, revert(ctx, sid, turn_id, etag_of(ctx, sid, client), client))


@setup_step("SESS-PATCH-001")
def patched(ctx: CheckContext, response: Response) -> dict[str, Any]:
    """The answer of a session patch that must succeed (a set-up step of the checks that patch)."""
    ctx.expect_status(response, 200, None, "SESS-PATCH-001")
    return response.json()  # type: ignore[no-any-return]


@setup_step("REVERT-KEEP-001")
def reverts_of(ctx: CheckContext, sid: str, client: ApiClient | None = None) -> list[dict[str, Any]]:
    """The reverts a session lists (a set-up step: anything but 200 fails REVERT-KEEP-001)."""
    listed = (client or ctx.alice).get(f"/sessions/{sid}/reverts")
    ctx.expect_status(listed, 200, None, "REVERT-KEEP-001")
    return listed.json()["reverts"]  # type: ignore[no-any-return]


def ranges(revert_view: dict[str, Any]) -> list[tuple[int, int]]:
    """The record index ranges a revert took out, as (first_index, end_index) pairs."""
    return [(item["first_index"], item["end_index"]) for item in revert_view["reverted_records"]]


def keys(records: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(r["session_id"], r["index"]) for r in records]


@check("REVERT-ETAG-001", title="A session's strong ETag changes with every change to its transcript or metadata, and only then",
       needs=(REVERT,))
def etag_follows_changes(ctx: CheckContext) -> None:
    created = ctx.alice.post("/sessions", json={"session_id": ctx.new_id("s"), "name": "n"})
    ctx.expect_status(created, 201)
    sid = created.json()["session_id"]
    seen: dict[str, str] = {}

    def tag(after: str) -> str:
        current = etag_of(ctx, sid)
        ctx.expect(not current.startswith("W/"), f"after {after} the ETag {current} is weak")
        return current

    first = tag("creation")
    ctx.expect(created.header("ETag") == first, f"POST /sessions answered ETag {created.header('ETag')!r}, GET {first}")
    ctx.expect(tag("a second read") == first, "reading the session changed its ETag")
    seen[first] = "creation"

    def changed(after: str) -> str:
        current = tag(after)
        ctx.expect(current not in seen, f"after {after} the ETag is {current}, as after {seen.get(current)}")
        seen[current] = after
        return current

    turn = ctx.start_turn(sid)
    changed("a turn start")
    ctx.append(sid, turn["turn_id"], 2)
    changed("an append")
    ctx.finish(sid, turn["turn_id"])
    current = changed("a finish")
    ctx.fork_ok(sid, {"mode": "latest"})
    ctx.expect(tag("a fork of the session") == current, "forking the session changed its ETag")
    if ctx.has("writer-lease"):
        release_held(ctx, sid, held_lease(ctx, sid)["lease_id"])  # a ttl that outlasts the two requests under load
        ctx.expect(tag("a lease taken and released") == current, "a writer lease changed the session's ETag")
    second = ctx.start_turn(sid)
    ctx.finish(sid, second["turn_id"])
    changed("a second turn")
    answer = revert(ctx, sid, second["turn_id"], etag_of(ctx, sid))
    reverted(ctx, answer)
    after_revert = changed("a revert")
    ctx.expect(answer.header("ETag") == after_revert, f"the revert answered ETag {answer.header('ETag')!r}, GET {after_revert}")
    if ctx.has("session-patch"):
        patch = ctx.alice.request("PATCH", f"/sessions/{sid}", json={"name": "m"},
                                    headers={"If-Match": after_revert, "Content-Type": "application/merge-patch+json"})
        patched(ctx, patch)
        changed("a patch of the name")


@check("REVERT-001", title="A revert ends the effective transcript just before the turn; indexes go on, never reused",
       needs=(REVERT,))
def revert_before_a_turn(ctx: CheckContext) -> None:
    session, turns, records = ctx.conversation(3)
    sid = session["session_id"]
    tag = etag_of(ctx, sid)
    answer = revert(ctx, sid, turns[1]["turn_id"], tag)
    ctx.expect_status(answer, 200)
    body = answer.json()
    done = body["revert"]
    ctx.expect(body["session"]["session_id"] == sid, f"the revert answered session {body['session']['session_id']}")
    ctx.expect(done["revision"] == 1 and done["before_turn_id"] == turns[1]["turn_id"], f"the revert answered {done}")
    ctx.expect((done["reverted_turn_count"], done["reverted_record_count"]) == (2, 4),
               f"reverting 2 turns of 2 records each answered {done['reverted_turn_count']} turns, {done['reverted_record_count']} records")
    ctx.expect(ranges(done) == [(2, 6)], f"reverted_records {done['reverted_records']}")
    ctx.expect(answer.header("ETag") not in (None, tag), "the revert's answer must carry the session's new ETag")
    ctx.expect(keys(ctx.walk(sid)) == keys(records[:2]), "the transcript after the revert is not the records before the turn")
    turn, written = ctx.run_turn(sid, "assistant", 2)
    ctx.expect(turn["index"] == 3, f"the turn after the revert has index {turn['index']}; indexes are never reused")
    ctx.expect([r["index"] for r in written] == [6, 7], f"records after the revert have indexes {[r['index'] for r in written]}")
    ctx.expect(keys(ctx.walk(sid)) == keys(records[:2] + written), "the transcript after the revert and a new turn")
    # Turns that are not the session's own effective turns.
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    ctx.run_turn(child, "user", 1)
    for what, target, session_id in (
        ("a reverted turn", turns[2]["turn_id"], sid),
        ("an unknown turn", ctx.new_id("turn"), sid),
        ("an inherited turn", turns[0]["turn_id"], child),
    ):
        response = revert(ctx, session_id, target, etag_of(ctx, session_id))
        ctx.expect_status(response, 422, "unknown-turn")
    running = ctx.start_turn(sid)
    response = revert(ctx, sid, turn["turn_id"], etag_of(ctx, sid))
    ctx.expect_status(response, 409, "turn-in-progress")
    ctx.finish(sid, running["turn_id"])
    # The writer role, and a held writer lease.
    if ctx.has("sharing") and len(ctx.clients) >= 3:
        from conformance.checks.authorization.common import grant

        (reader,) = ctx.principals("reader")
        grant(ctx, ctx.alice, sid, reader, "reader")
        response = revert(ctx, sid, turn["turn_id"], etag_of(ctx, sid, reader), reader)
        ctx.expect_status(response, 403, "forbidden")
    if ctx.has("writer-lease"):
        held = held_lease(ctx, sid)["lease_id"]
        ctx.expect_status(revert(ctx, sid, turn["turn_id"], etag_of(ctx, sid)), 409, "writer-conflict")
        ok = revert(ctx, sid, turn["turn_id"], etag_of(ctx, sid), headers={"Writer-Lease": held})
        ctx.expect_status(ok, 200)
        ctx.alice.request("DELETE", f"/sessions/{sid}/lease", headers={"Writer-Lease": held})
    else:  # no writer leases: the owner reverts with no lease header at all
        ctx.expect_status(revert(ctx, sid, turn["turn_id"], etag_of(ctx, sid)), 200)
    ctx.expect(keys(ctx.walk(sid)) == keys(records[:2]), "after reverting the new turns the transcript is not the first two")


@check("REVERT-CAS-001", title="A revert needs If-Match with the current ETag (strong comparison): 428 without, 412 when stale",
       needs=(REVERT,))
def revert_compares_the_etag(ctx: CheckContext) -> None:
    session, turns, records = ctx.conversation(2)
    sid = session["session_id"]
    tag = etag_of(ctx, sid)
    target = turns[1]["turn_id"]
    ctx.expect_status(revert(ctx, sid, target, None), 428, "precondition-required")
    stale = ctx.start_turn(sid)
    ctx.finish(sid, stale["turn_id"])
    current = etag_of(ctx, sid)
    for if_match in (tag, f"W/{current}", '"not-a-tag-of-this-session"', f"{tag}, {tag}"):
        ctx.expect_status(revert(ctx, sid, target, if_match), 412, "precondition-failed")
    ctx.expect(etag_of(ctx, sid) == current, "a refused revert changed the session's ETag")
    ctx.expect(len(ctx.walk(sid)) == len(records), "a refused revert changed the transcript")
    ok = revert(ctx, sid, stale["turn_id"], f'"other", {current}')
    ctx.expect_status(ok, 200)
    ok = revert(ctx, sid, target, "*")
    ctx.expect_status(ok, 200)
    ctx.expect(keys(ctx.walk(sid)) == keys(records[:2]), "the transcript after two reverts")


@check("REVERT-CONCURRENT-001", title="Of concurrent reverts with one If-Match, exactly one succeeds", needs=(REVERT,))
def concurrent_reverts(ctx: CheckContext) -> None:
    def prepare() -> tuple[str, list[str], str]:
        session, turns, _ = ctx.conversation(3, records_per_turn=1)
        sid = session["session_id"]
        return sid, [t["turn_id"] for t in turns], etag_of(ctx, sid)

    def attempt(state: tuple[str, list[str], str], n: int, client: ApiClient) -> Response:
        sid, turns, tag = state
        return revert(ctx, sid, turns[1 + n % 2], tag, client)

    def judge(state: tuple[str, list[str], str], answers: list[Response]) -> None:
        sid = state[0]
        for answer in answers:
            if answer.status != 200:
                ctx.expect_status(answer, 412, "precondition-failed")
        won = [a for a in answers if a.status == 200]
        ctx.expect(len(won) == 1, f"{len(won)} of {len(answers)} concurrent reverts of {sid} with one If-Match succeeded")
        listed = reverts_of(ctx, sid)
        ctx.expect(len(listed) == 1, f"{len(listed)} reverts were recorded for one success")

    rounds(ctx, prepare, attempt, judge)


@check("REVERT-KEEP-001", title="Reverted records stay readable as history; the reverts are listed", needs=(REVERT,))
def reverted_records_stay_readable(ctx: CheckContext) -> None:
    session, turns, records = ctx.conversation(3)
    sid = session["session_id"]
    own = ctx.walk(sid, "records")
    first = revert_ok(ctx, sid, turns[2]["turn_id"])
    ctx.run_turn(sid, "assistant", 1)
    second = revert_ok(ctx, sid, turns[1]["turn_id"])
    after = ctx.walk(sid, "records")
    ctx.expect(after[: len(own)] == own, "GET /records no longer answers the reverted records as they were written")
    ctx.expect(len(after) == len(own) + 1, f"GET /records answered {len(after)} records; {len(own) + 1} were written")
    listed = ctx.alice.get(f"/sessions/{sid}/reverts")
    ctx.expect_status(listed, 200)
    ctx.expect(listed.json()["reverts"] == [first["revert"], second["revert"]],
               f"GET /reverts answered {listed.json()['reverts']}; the reverts answered {[first['revert'], second['revert']]}")
    taken = sorted(i for start, end in ranges(second["revert"]) for i in range(start, end))  # not how ranges split
    ctx.expect(taken == [2, 3, 6], f"the second revert took out {second['revert']['reverted_records']}, not records 2, 3, 6")
    stranger = ctx.bob.get(f"/sessions/{sid}/reverts")
    ctx.expect_status(stranger, 404, "not-found")


@check("REVERT-EFFECTIVE-001", title="Reverted records never re-enter the transcript: later reads, forks with any cut",
       needs=(REVERT,))
def reverted_records_never_come_back(ctx: CheckContext) -> None:
    session, turns, records = ctx.conversation(4)
    sid = session["session_id"]
    revert_ok(ctx, sid, turns[2]["turn_id"])
    kept = keys(records[:4])
    ctx.expect(keys(ctx.walk(sid)) == kept, "the transcript holds reverted records")
    latest = ctx.fork_ok(sid, {"mode": "latest"})
    ctx.expect(keys(ctx.walk(latest["session"]["session_id"])) == kept, "a latest fork after the revert inherits reverted records")
    ctx.expect(latest["lineage"]["inherited_turn_count"] == 2, f"a latest fork inherits {latest['lineage']['inherited_turn_count']} turns; 2 remain")
    through = ctx.fork_ok(sid, {"mode": "through", "turn_id": turns[1]["turn_id"]})
    ctx.expect(keys(ctx.walk(through["session"]["session_id"])) == kept, "a fork through the last kept turn")
    for mode in ("through", "before"):
        for turn in turns[2:]:
            response = ctx.fork(sid, {"mode": mode, "turn_id": turn["turn_id"]})
            ctx.expect_status(response, 422, "unknown-turn")
    turn, written = ctx.run_turn(sid, "user", 2)
    ctx.expect(keys(ctx.walk(sid)) == kept + keys(written), "the transcript after a new turn holds reverted records")
    before_new = ctx.fork_ok(sid, {"mode": "before", "turn_id": turn["turn_id"]})
    ctx.expect(keys(ctx.walk(before_new["session"]["session_id"])) == kept, "a fork before the new turn")
    revert_ok(ctx, sid, turns[1]["turn_id"])
    ctx.expect(keys(ctx.walk(sid)) == keys(records[:2]), "a second revert brought records back")
    again = ctx.fork_ok(sid, {"mode": "latest"})
    ctx.expect(keys(ctx.walk(again["session"]["session_id"])) == keys(records[:2]), "a latest fork after the second revert")
    empty = ctx.create_session()["session_id"]
    first, _ = ctx.run_turn(empty, "user", 1)
    revert_ok(ctx, empty, first["turn_id"])
    ctx.expect(ctx.walk(empty) == [], "reverting before the first turn leaves an empty transcript")
    nothing = ctx.fork_ok(empty, {"mode": "latest"})
    ctx.expect(ctx.walk(nothing["session"]["session_id"]) == [] and nothing["lineage"]["inherited_turn_count"] == 0,
               "a latest fork of a session reverted before its first turn inherits something")


@check("REVERT-FORKS-001", title="Forks taken before a revert keep their view", needs=(REVERT,))
def earlier_forks_keep_their_view(ctx: CheckContext) -> None:
    session, turns, records = ctx.conversation(3)
    sid = session["session_id"]
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    ctx.run_turn(child, "assistant", 1)
    grandchild = ctx.fork_ok(child, {"mode": "latest"})["session"]["session_id"]
    middle = ctx.fork_ok(sid, {"mode": "through", "turn_id": turns[1]["turn_id"]})["session"]["session_id"]
    views = {name: ctx.walk(name) for name in (child, grandchild, middle)}
    revert_ok(ctx, sid, turns[0]["turn_id"])
    ctx.run_turn(sid, "user", 1)
    for name, view in views.items():
        ctx.expect(ctx.walk(name) == view, f"session {name}, forked before the revert, changed its transcript")
    late = ctx.fork_ok(child, {"mode": "latest"})["session"]["session_id"]
    ctx.expect(keys(ctx.walk(late))[: len(records)] == keys(records), "a fork of the earlier fork lost what it inherits")
    revert_ok(ctx, child, ctx.walk(child)[-1]["turn_id"])
    ctx.expect(ctx.walk(grandchild) == views[grandchild], "a revert of the middle session changed its descendant")


@check("REVERT-CURSOR-001", title="A transcript cursor from before a revert answers 409 cursor-reverted; other cursors stay valid",
       needs=(REVERT,))
def cursors_from_before_a_revert(ctx: CheckContext) -> None:
    session, turns, _ = ctx.conversation(3)
    sid = session["session_id"]
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]

    def cursor(path: str) -> str:
        response = ctx.alice.get(path, params={"limit": 1})
        ctx.expect_status(response, 200)
        return str(response.json()["next_cursor"])

    transcript, records, child_transcript = cursor(f"/sessions/{sid}/transcript"), cursor(f"/sessions/{sid}/records"), \
        cursor(f"/sessions/{child}/transcript")
    revert_ok(ctx, sid, turns[1]["turn_id"])
    stale = ctx.alice.get(f"/sessions/{sid}/transcript", params={"cursor": transcript, "limit": 1})
    ctx.expect_status(stale, 409, "cursor-reverted")
    for path, value in ((f"/sessions/{sid}/records", records), (f"/sessions/{child}/transcript", child_transcript)):
        ctx.expect_status(ctx.alice.get(path, params={"cursor": value, "limit": 1}), 200)
    fresh = ctx.walk(sid, limit=1)
    ctx.expect(len(fresh) == 2, f"reading again from the first page gave {len(fresh)} records; 2 remain")


@check("REVERT-SCOPE-001", title="A revert leaves metadata, lineage, grants, lease and descendants as they were", needs=(REVERT,))
def revert_touches_only_the_transcript(ctx: CheckContext) -> None:
    session, turns, _ = ctx.conversation(2, name="kept name", description="kept description")
    sid = session["session_id"]
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    grandchild = ctx.fork_ok(child, {"mode": "latest"})
    ctx.run_turn(child, "user", 1)
    kept = ("name", "description", "lineage")  # what REVERT-SCOPE-001 names; other members are open

    def scope() -> dict[str, Any]:
        session = ctx.ok(ctx.alice.get(f"/sessions/{child}"), 200)
        return {member: session.get(member) for member in kept}

    before = scope()
    child_view = ctx.walk(child)
    lineage = ctx.alice.get(f"/sessions/{child}/lineage").json()
    reader = None
    if ctx.has("sharing") and len(ctx.clients) >= 3:
        from conformance.checks.authorization.common import grant

        (reader,) = ctx.principals("reader")
        grant(ctx, ctx.alice, child, reader, "reader")
    headers: dict[str, str] = {}
    if ctx.has("writer-lease"):
        headers["Writer-Lease"] = held_lease(ctx, child)["lease_id"]
    own = ctx.walk(child, "records")
    response = revert(ctx, child, own[0]["turn_id"], etag_of(ctx, child), headers=headers)
    ctx.expect_status(response, 200)
    ctx.expect(scope() == before, f"the revert changed the session's metadata or lineage summary: {before} became {scope()}")
    ctx.expect(ctx.alice.get(f"/sessions/{child}/lineage").json() == lineage, "the revert changed the lineage")
    ctx.expect(ctx.walk(child) == child_view[: len(child_view) - len(own)], "the revert took out more than the own turns")
    ctx.expect(ctx.walk(grandchild["session"]["session_id"]) == child_view[: len(child_view) - len(own)],
               "the revert changed a descendant")
    if reader is not None:
        ctx.expect_status(reader.get(f"/sessions/{child}"), 200, None, "REVERT-SCOPE-001")  # the grant stays
    if headers:
        blocked = ctx.alice.post(f"/sessions/{child}/turns", json={"role": "user"})
        ctx.expect_status(blocked, 409, "writer-conflict")
        ctx.alice.request("DELETE", f"/sessions/{child}/lease", headers=headers)


@check("REVERT-COST-001", title="Reverted transcripts cost what any transcript costs, at depths 0, 1, 5 and the maximum",
       needs=(REVERT, QUERY_COUNT))
def reverted_transcript_cost(ctx: CheckContext) -> None:
    maximum = ctx.limits["max_lineage_depth"]
    if maximum < max(DEPTHS):
        raise CheckFailed(f"max_lineage_depth is {maximum}, below the minimum of {max(DEPTHS)}", ["CAP-LIMITS-001"])
    # A chain in which every session is reverted once before its child is forked.
    session, _, _ = ctx.conversation(2, records_per_turn=1)
    ids = [session["session_id"]]
    revert_costs = []
    for depth in range(maximum + 1):
        sid = ids[-1]
        extra, _ = ctx.run_turn(sid, "user", 1)
        ctx.run_turn(sid, "assistant", 1)
        answer = revert(ctx, sid, extra["turn_id"], etag_of(ctx, sid))
        reverted(ctx, answer)
        revert_costs.append(round_trips(ctx, answer, "revert"))
        if depth < maximum:
            ids.append(ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"])
    pages = {}
    for depth in sorted({*DEPTHS, maximum}):
        response = ctx.alice.get(f"/sessions/{ids[depth]}/transcript")
        ctx.expect_status(response, 200)
        pages[depth] = round_trips(ctx, response, f"depth {depth} page after reverts")
    plain = ctx.chain(1)
    response = ctx.alice.get(f"/sessions/{plain[-1]}/transcript")
    baseline = round_trips(ctx, response, "page without reverts")
    ctx.expect(set(pages.values()) == {baseline} and baseline <= TRANSCRIPT_PAGE_BOUND,
               f"transcript page round trips by depth of a reverted chain: {pages}; never reverted: {baseline}")
    many = ids[0]
    for _ in range(3):
        turn, _ = ctx.run_turn(many, "user", 1)
        revert(ctx, many, turn["turn_id"], etag_of(ctx, many))
    response = ctx.alice.get(f"/sessions/{many}/transcript")
    ctx.expect(round_trips(ctx, response, "page after 4 reverts") == baseline, f"after 4 reverts a page costs {round_trips(ctx, response)}, not {baseline}")
    big, big_turns, _ = ctx.conversation(6, records_per_turn=min(20, ctx.limits["max_records_per_append"]))
    answer = revert(ctx, big["session_id"], big_turns[3]["turn_id"], etag_of(ctx, big["session_id"]))
    reverted(ctx, answer)
    revert_costs.append(round_trips(ctx, answer, "revert of a large source"))
    ctx.expect(len(set(revert_costs)) == 1, f"revert round trips as the chain grew, then on a larger session: {revert_costs}")
