"""Chapter: sessions, turns and records."""

from __future__ import annotations

import json

from conformance.checks.contention import rounds
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.registry import check

MISSING = object()  # a member left out of the request, as against null


@check("SESS-CREATE-001", title="A root session is created with a server-chosen id")
def create_root_session(ctx: CheckContext) -> None:
    response = ctx.alice.post("/sessions", json={"name": ctx.new_id("name")})
    ctx.expect_status(response, 201)
    created = response.json()
    ctx.expect(created["lineage"] is None, "a root session must have lineage null")
    read = ctx.alice.get(f"/sessions/{created['session_id']}")
    ctx.expect_status(read, 200)
    ctx.expect(read.json() == created, f"GET returned {read.json()}, created {created}")


@check("SESS-CREATE-001", title="Name and description: absent and null store null, a string (the empty one too) is stored as given")
def create_three_state(ctx: CheckContext) -> None:
    for given, stored in ((MISSING, None), (None, None), ("", ""), ("text", "text")):
        body = {} if given is MISSING else {"name": given, "description": given}
        created = ctx.ok(ctx.alice.post("/sessions", json=body), 201)
        read = ctx.ok(ctx.alice.get(f"/sessions/{created['session_id']}"), 200)
        for where, session in (("the answer", created), ("a later GET", read)):
            got = (session["name"], session["description"])
            ctx.expect(got == (stored, stored),
                       f"created with name and description {'absent' if given is MISSING else repr(given)}: {where} "
                       f"gives {got}, expected {(stored, stored)}")


@check("SESS-ID-001", title="Client-chosen session ids are used as given; invalid ones are refused")
def client_chosen_session_id(ctx: CheckContext) -> None:
    wanted = ctx.new_id("chosen")
    created = ctx.create_session(session_id=wanted)
    ctx.expect(created["session_id"] == wanted, f"asked for {wanted}, got {created['session_id']}")
    for bad in ["", "has space", "x" * 129, "slash/inside", "dot.dot", "ünïcode", 42, None]:
        response = ctx.alice.post("/sessions", json={"session_id": bad})
        ctx.expect_status(response, 422, "invalid-request")


@check("SESS-ID-CONFLICT-001", title="A taken session id is refused and the session is unchanged")
def duplicate_session_id(ctx: CheckContext) -> None:
    session = ctx.create_session(name="original")
    response = ctx.alice.post("/sessions", json={"session_id": session["session_id"], "name": "other"})
    ctx.expect_status(response, 409, "session-exists")
    after = ctx.alice.get(f"/sessions/{session['session_id']}").json()
    ctx.expect(after["name"] == "original", f"the existing session changed: {after}")


@check("SESS-TURN-001", title="Turns start running with consecutive indexes; turn ids are unique")
def start_turn(ctx: CheckContext) -> None:
    session = ctx.create_session()
    sid = session["session_id"]
    first = ctx.start_turn(sid, "user")
    ctx.expect(first["status"] == "running" and first["index"] == 0, f"first turn: {first}")
    ctx.expect(first["finished_at"] is None, "a running turn has finished_at null")
    ctx.finish(sid, first["turn_id"])
    chosen = ctx.new_id("turn")
    second = ctx.start_turn(sid, "assistant", turn_id=chosen)
    ctx.expect(second["turn_id"] == chosen, f"asked for turn id {chosen}, got {second['turn_id']}")
    ctx.expect(second["index"] == 1 and second["role"] == "assistant", f"second turn: {second}")
    ctx.finish(sid, chosen)
    other = ctx.create_session()
    response = ctx.alice.post(f"/sessions/{other['session_id']}/turns", json={"role": "user", "turn_id": chosen})
    ctx.expect_status(response, 409, "turn-exists")


@check("SESS-TURN-SINGLE-001", title="A session runs one turn at a time")
def one_running_turn(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    running = ctx.start_turn(sid)
    response = ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "assistant"})
    ctx.expect_status(response, 409, "turn-in-progress")
    ctx.finish(sid, running["turn_id"])
    ctx.start_turn(sid, "assistant")


@check("SESS-TURN-FINISH-001", title="A turn is finished once, as completed or failed")
def finish_turn_once(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    for status in ("completed", "failed"):
        turn = ctx.start_turn(sid)
        finished = ctx.finish(sid, turn["turn_id"], status)
        ctx.expect(finished["status"] == status, f"finished turn: {finished}")
        ctx.expect(finished["finished_at"] is not None, "a finished turn has finished_at")
        again = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/finish", json={"status": "completed"})
        ctx.expect_status(again, 409, "turn-not-running")


@check("SESS-RECORD-APPEND-001", title="Appended records carry ids, provenance and consecutive indexes")
def append_records(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    turn, first = ctx.run_turn(sid, "user", 3)
    turn2, second = ctx.run_turn(sid, "assistant", 2)
    written = first + second
    ctx.expect([r["index"] for r in written] == list(range(5)), f"indexes {[r['index'] for r in written]}")
    ctx.expect(len({r["record_id"] for r in written}) == 5, "record ids must be distinct")
    for record, turn_id in zip(written, [turn["turn_id"]] * 3 + [turn2["turn_id"]] * 2):
        ctx.expect(record["session_id"] == sid and record["turn_id"] == turn_id, f"provenance of {record}")
    read = ctx.walk(sid, "records")
    ctx.expect(read == written, "the session's records differ from what was appended")


@check("SESS-RECORD-CLOSED-001", title="Finished turns take no more records")
def closed_turn(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    turn, written = ctx.run_turn(sid, "user", 2, status="completed")
    response = ctx.alice.post(
        f"/sessions/{sid}/turns/{turn['turn_id']}/records",
        json={"records": [{"type": "message", "content": {"late": True}}]},
    )
    ctx.expect_status(response, 409, "turn-not-running")
    ctx.expect(ctx.walk(sid, "records") == written, "a record was appended to a finished turn")


@check("SESS-RECORD-LIMITS-001", title="Records and batches above the advertised limits are refused")
def record_limits(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    turn = ctx.start_turn(sid)
    big = {"type": "message", "content": {"text": "x" * (ctx.limits["max_record_bytes"] + 1)}}
    response = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": [big]})
    ctx.expect_status(response, 413, "payload-too-large")
    many = [{"type": "message", "content": {}}] * (ctx.limits["max_records_per_append"] + 1)
    response = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": many})
    ctx.expect_status(response, 413, "payload-too-large")
    ctx.expect(ctx.walk(sid, "records") == [], "a refused append stored records")
    overhead = len(json.dumps({"text": ""}, separators=(",", ":")))
    exact = {"type": "message", "content": {"text": "x" * (ctx.limits["max_record_bytes"] - overhead)}}
    response = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": [exact]})
    ctx.expect_status(response, 201)  # exactly at the limit is allowed
    batch = [{"type": "message", "content": {}}] * ctx.limits["max_records_per_append"]
    response = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": batch})
    ctx.expect_status(response, 201)


@check("SESS-RECORD-ATOMIC-001", title="A refused batch stores none of its records")
def atomic_append(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    turn = ctx.start_turn(sid)
    before = ctx.append(sid, turn["turn_id"], 1)
    ok = {"type": "message", "content": {"text": "fine"}}
    big = {"type": "message", "content": {"text": "x" * (ctx.limits["max_record_bytes"] + 1)}}
    for batch, status in (([ok, big], 413), ([ok, {"type": "message"}], 422), ([ok, {"type": 7, "content": {}}], 422)):
        response = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": batch})
        ctx.expect_status(response, status)
    ctx.expect(ctx.walk(sid, "records") == before, "part of a refused batch was stored")


# ---------------------------------------------------------------- races: exactly one effect
@check("SESS-ID-CONFLICT-001", title="Concurrent creates of one session id: one 201, the rest 409 session-exists")
def concurrent_creates(ctx: CheckContext) -> None:
    def attempt(sid: str, n: int, client: ApiClient) -> Response:
        return client.post("/sessions", json={"session_id": sid, "name": f"contender-{n}"})

    def judge(sid: str, answers: list[Response]) -> None:
        for answer in answers:
            if answer.status != 201:
                ctx.expect_status(answer, 409, "session-exists")
        won = [a for a in answers if a.status == 201]
        ctx.expect(len(won) == 1, f"{len(won)} of {len(answers)} concurrent POST /sessions with session_id {sid} answered 201")
        stored = ctx.ok(ctx.alice.get(f"/sessions/{sid}"), 200)
        ctx.expect(
            stored["name"] == won[0].json()["name"],
            f"session {sid} was answered as {won[0].json()['name']!r} but is stored as {stored['name']!r}",
        )

    rounds(ctx, lambda: ctx.new_id("contested"), attempt, judge)


@check("SESS-TURN-SINGLE-001", title="Concurrent turn starts on one session: one 201, the rest 409 turn-in-progress")
def concurrent_turn_starts(ctx: CheckContext) -> None:
    def attempt(sid: str, n: int, client: ApiClient) -> Response:
        return client.post(f"/sessions/{sid}/turns", json={"role": "user" if n % 2 else "assistant"})

    def judge(sid: str, answers: list[Response]) -> None:
        for answer in answers:
            if answer.status != 201:
                ctx.expect_status(answer, 409, "turn-in-progress")
        won = [a for a in answers if a.status == 201]
        ctx.expect(len(won) == 1, f"{len(won)} of {len(answers)} concurrent turn starts on session {sid} answered 201")
        ctx.finish(sid, won[0].json()["turn_id"])
        after = ctx.start_turn(sid)
        ctx.expect(after["index"] == 1, f"the turn started after the race has index {after['index']}; one turn was started before it")

    rounds(ctx, lambda: ctx.create_session()["session_id"], attempt, judge)


@check("SESS-TURN-FINISH-001", title="Concurrent finishes of one turn: one 200, the rest 409 turn-not-running")
def concurrent_finishes(ctx: CheckContext) -> None:
    def prepare() -> tuple[str, str]:
        sid = ctx.create_session()["session_id"]
        return sid, ctx.start_turn(sid)["turn_id"]

    def attempt(state: tuple[str, str], n: int, client: ApiClient) -> Response:
        sid, turn_id = state
        return client.post(f"/sessions/{sid}/turns/{turn_id}/finish", json={"status": "completed" if n % 2 else "failed"})

    def judge(state: tuple[str, str], answers: list[Response]) -> None:
        for answer in answers:
            if answer.status != 200:
                ctx.expect_status(answer, 409, "turn-not-running")
        won = [a for a in answers if a.status == 200]
        ctx.expect(len(won) == 1, f"{len(won)} of {len(answers)} concurrent finishes of turn {state[1]} answered 200")

    rounds(ctx, prepare, attempt, judge)
