"""Chapter: idempotent turn writes (`idempotent-turns`) and the one-request turn write (`turn-write`)."""

from __future__ import annotations

from typing import Any

from conformance.checks.contention import rounds
from conformance.checks.rollout import _action, _rewound_child
from conformance.checks.diagnostics import CAPABILITY as QUERY_COUNT
from conformance.counts import round_trips
from conformance.client import ApiClient, Response, describe
from conformance.context import CheckContext
from conformance.registry import check, setup_step

IDEM = "idempotent-turns"
WRITE = "turn-write"
# TURN-WRITE-COST-001: the most a one-request message pair may cost, without and with a key.
PAIR_BOUND = 8
PAIR_BOUND_WITH_KEY = 10
IN_FLIGHT = "urn:session-lineage:problem:idempotency-in-flight"
TURN_IN_PROGRESS = "urn:session-lineage:problem:turn-in-progress"


def _key_header(key: str | None) -> dict[str, str] | None:
    return {"Idempotency-Key": f'"{key}"'} if key is not None else None


def _start(ctx: CheckContext, sid: str, body: dict[str, Any], key: str | None = None, client: ApiClient | None = None) -> Response:
    return (client or ctx.alice).post(f"/sessions/{sid}/turns", json=body, headers=_key_header(key))


def _append(ctx: CheckContext, sid: str, tid: str, records: list[dict[str, Any]], key: str | None = None,
            client: ApiClient | None = None) -> Response:
    return (client or ctx.alice).post(f"/sessions/{sid}/turns/{tid}/records", json={"records": records}, headers=_key_header(key))


def _finish(ctx: CheckContext, sid: str, tid: str, status: str = "completed", key: str | None = None,
            client: ApiClient | None = None) -> Response:
    return (client or ctx.alice).post(f"/sessions/{sid}/turns/{tid}/finish", json={"status": status}, headers=_key_header(key))


def _records(ctx: CheckContext, count: int, label: str = "m") -> list[dict[str, Any]]:
    return [{"type": "message", "content": {"text": f"{label}-{n}", "nonce": ctx.rng.randrange(10**9)}} for n in range(count)]


def _expect_replay(ctx: CheckContext, first: Response, retry: Response, what: str) -> None:
    ctx.expect_status(retry, first.status)
    ctx.expect(retry.json() == first.json(), f"the retried {what} answered {retry.json()}, the first answer was {first.json()}")
    ctx.expect(retry.header("Idempotency-Replayed") == "true", f"a replayed {what} must say Idempotency-Replayed: true")


def _next_index(ctx: CheckContext, sid: str) -> int:
    """The index the next turn of the session gets (starts and finishes a probe turn)."""
    probe = ctx.start_turn(sid)
    ctx.finish(sid, probe["turn_id"])
    return int(probe["index"])


@check("TURN-IDEM-001", title="Start, append and finish retried with their key replay the first answer and change nothing",
       needs=(IDEM,))
def idempotent_turn_retries(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    key = ctx.new_id("key")
    first = _start(ctx, sid, {"role": "user"}, key)
    ctx.expect_status(first, 201)
    ctx.expect(first.header("Idempotency-Replayed") in (None, "false"), "the first start is marked as a replay")
    tid = first.json()["turn_id"]
    for _ in range(2):
        _expect_replay(ctx, first, _start(ctx, sid, {"role": "user"}, key), "turn start")
    records = _records(ctx, 2)
    appended = _append(ctx, sid, tid, records, key=ctx.new_id("key"))
    ctx.expect_status(appended, 201)
    append_key = ctx.new_id("key")
    more = _append(ctx, sid, tid, _records(ctx, 1, "more"), key=append_key)
    ctx.expect_status(more, 201)
    again = [{"type": r["type"], "content": r["content"]} for r in more.json()["records"]]
    _expect_replay(ctx, more, _append(ctx, sid, tid, again, key=append_key), "append")
    finish_key = ctx.new_id("key")
    finished = _finish(ctx, sid, tid, "completed", finish_key)
    ctx.expect_status(finished, 200)
    _expect_replay(ctx, finished, _finish(ctx, sid, tid, "completed", finish_key), "finish")
    # Nothing happened twice: one turn, three records.
    stored = ctx.walk(sid, "records")
    ctx.expect(len(stored) == 3, f"the session holds {len(stored)} records after 2 + 1 appended once each and retried")
    ctx.expect(_next_index(ctx, sid) == 1, "a retried start started a second turn")
    # A refused request stores nothing: its retry is evaluated afresh.
    busy = ctx.start_turn(sid)
    refused_key = ctx.new_id("key")
    refused = _start(ctx, sid, {"role": "assistant"}, refused_key)
    ctx.expect_status(refused, 409, "turn-in-progress")
    ctx.finish(sid, busy["turn_id"])
    fresh = _start(ctx, sid, {"role": "assistant"}, refused_key)
    ctx.expect_status(fresh, 201)
    ctx.expect(fresh.header("Idempotency-Replayed") in (None, "false"), "a refused request's retry must not be a replay")
    ctx.finish(sid, fresh.json()["turn_id"])
    # Malformed keys are refused.
    for bad in ('"unterminated', "", "a b", '"' + "k" * 256 + '"'):
        response = ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}, headers={"Idempotency-Key": bad})
        ctx.expect_status(response, 400, "invalid-idempotency-key")
    if ctx.has(WRITE):
        body = {"role": "user", "records": _records(ctx, 2), "status": "completed"}
        write_key = ctx.new_id("key")
        whole = _start(ctx, sid, body, write_key)
        ctx.expect_status(whole, 201)
        _expect_replay(ctx, whole, _start(ctx, sid, body, write_key), "one-request turn")
        ctx.expect(len(ctx.walk(sid, "records")) == 5, "a retried one-request turn stored its records twice")


@check("TURN-IDEM-MISMATCH-001", title="A turn-write key reused with a different request answers 422 and changes nothing",
       needs=(IDEM,))
def turn_key_reused_differently(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    other = ctx.create_session()["session_id"]
    key = ctx.new_id("key")
    started = _start(ctx, sid, {"role": "user"}, key)
    ctx.expect_status(started, 201)
    tid = started.json()["turn_id"]
    variants = [
        lambda: _start(ctx, sid, {"role": "assistant"}, key),
        lambda: _start(ctx, other, {"role": "user"}, key),
        lambda: _append(ctx, sid, tid, _records(ctx, 1), key),
        lambda: _finish(ctx, sid, tid, "completed", key),
        lambda: ctx.fork(sid, {"mode": "latest"}, key=key),
    ]
    for variant in variants:
        ctx.expect_status(variant(), 422, "idempotency-key-reused")
    append_key = ctx.new_id("key")
    ctx.expect_status(_append(ctx, sid, tid, _records(ctx, 1, "a"), append_key), 201)
    ctx.expect_status(_append(ctx, sid, tid, _records(ctx, 1, "b"), append_key), 422, "idempotency-key-reused")
    ctx.expect(len(ctx.walk(sid, "records")) == 1, "an append refused for its reused key stored records")
    finish_key = ctx.new_id("key")
    ctx.expect_status(_finish(ctx, sid, tid, "completed", finish_key), 200)
    ctx.expect_status(_finish(ctx, sid, tid, "failed", finish_key), 422, "idempotency-key-reused")
    ctx.expect(ctx.walk(other, "records") == [] and _next_index(ctx, other) == 0,
               "a start refused for its reused key started a turn")


@check("TURN-IDEM-SCOPE-001", title="Another principal's turn-write key is an unrelated request", needs=(IDEM,))
def turn_keys_scoped_per_principal(ctx: CheckContext) -> None:
    alice, bob = ctx.principals("owner", "stranger")
    mine = ctx.create_session(alice)["session_id"]
    theirs = ctx.create_session(bob)["session_id"]
    for body in ({"role": "user"}, {"role": "assistant"}):  # an identical body, then a different one
        key = ctx.new_id("key")
        first = _start(ctx, mine, {"role": "user"}, key, alice)
        ctx.expect_status(first, 201)
        answer = _start(ctx, theirs, body, key, bob)
        ctx.expect_status(answer, 201)
        ctx.expect(answer.header("Idempotency-Replayed") in (None, "false"), "another principal's key was replayed")
        ctx.expect(answer.json()["session_id"] == theirs, f"bob's start answered a turn of {answer.json()['session_id']}")
        ctx.expect_status(_finish(ctx, theirs, answer.json()["turn_id"], key=key, client=bob), 422, "idempotency-key-reused")
        ctx.expect_status(_finish(ctx, theirs, answer.json()["turn_id"], client=bob), 200)
        ctx.expect_status(_finish(ctx, mine, first.json()["turn_id"], key=ctx.new_id("key"), client=alice), 200)


@check("TURN-IDEM-CONCURRENT-001", title="Concurrent identical turn starts and appends with one key take effect once",
       needs=(IDEM,))
def concurrent_identical_turn_writes(ctx: CheckContext) -> None:
    """TURN-IDEM-CONCURRENT-001: each answer is the first answer (its status and body) or 409
    idempotency-in-flight, and the write takes effect once. Which answer says `Idempotency-Replayed`
    is TURN-IDEM-001's header, not this rule's, and is not judged here."""

    def judge_same(answers: list[Response], status: int, what: str) -> Response:
        for answer in answers:
            ctx.expect(
                answer.status == status or (answer.status == 409 and answer.problem_type == IN_FLIGHT),
                f"{describe(answer.exchange)}: each of concurrent identical {what}s with one key answers the first "
                f"answer ({status}) or 409 idempotency-in-flight",
            )
        won = [a for a in answers if a.status == status]
        # The write takes effect once, and the request it took effect for was not refused.
        ctx.expect(bool(won), f"all {len(answers)} concurrent identical {what}s answered 409 idempotency-in-flight: "
                              "none answered the write that takes effect once")
        bodies = {repr(a.json()) for a in won}
        ctx.expect(len(bodies) == 1, f"{len(answers)} concurrent identical {what}s with one key gave {len(bodies)} different answers")
        return won[0]

    def prepare_start() -> tuple[str, str]:
        return ctx.create_session()["session_id"], ctx.new_id("key")

    def attempt_start(state: tuple[str, str], n: int, client: ApiClient) -> Response:
        return _start(ctx, state[0], {"role": "user"}, state[1], client)

    def judge_start(state: tuple[str, str], answers: list[Response]) -> None:
        sid = state[0]
        won = judge_same(answers, 201, "turn start")
        ctx.finish(sid, won.json()["turn_id"])
        # One turn started: with the answered one finished, the next start is free and gets index 1.
        probe = _start(ctx, sid, {"role": "user"})
        ctx.expect(not (probe.status == 409 and probe.problem_type == TURN_IN_PROGRESS),
                   "concurrent identical starts with one key started more than one turn: with the one they answered "
                   "finished, another still runs (409 turn-in-progress)")
        turn = ctx.started(probe)
        ctx.expect(turn["index"] <= won.json()["index"] + 1,
                   f"concurrent identical starts with one key answered turn {won.json()['index']}, and the next start "
                   f"got index {turn['index']}: they started more than one turn")
        ctx.finish(sid, turn["turn_id"])

    rounds(ctx, prepare_start, attempt_start, judge_start)

    def prepare_append() -> tuple[str, str, str, list[dict[str, Any]]]:
        sid = ctx.create_session()["session_id"]
        return sid, ctx.start_turn(sid)["turn_id"], ctx.new_id("key"), _records(ctx, 2)

    def attempt_append(state: tuple[str, str, str, list[dict[str, Any]]], n: int, client: ApiClient) -> Response:
        sid, tid, key, records = state
        return _append(ctx, sid, tid, records, key, client)

    def judge_append(state: tuple[str, str, str, list[dict[str, Any]]], answers: list[Response]) -> None:
        judge_same(answers, 201, "append")
        stored = ctx.walk(state[0], "records")
        ctx.expect(len(stored) == 2, f"concurrent identical appends of 2 records with one key stored {len(stored)} records")

    rounds(ctx, prepare_append, attempt_append, judge_append, limit=3)


@check("TURN-WRITE-001", title="A whole turn - start, records, final status - in one request, all or nothing",
       needs=(WRITE,))
def one_request_turn(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    records = _records(ctx, 2)
    response = _start(ctx, sid, {"role": "user", "records": records, "status": "completed"})
    ctx.expect_status(response, 201)
    turn = response.json()
    ctx.expect(turn["status"] == "completed" and turn["finished_at"] is not None, f"the turn written in one request: {turn}")
    ctx.expect(turn["index"] == 0, f"the first turn has index {turn['index']}")
    written = turn.get("records") or []
    ctx.expect([r.get("index") for r in written] == [0, 1], f"its records have indexes {[r.get('index') for r in written]}")
    ctx.expect([r.get("content") for r in written] == [r["content"] for r in records], "its records hold other content")
    ctx.expect(all(r.get("turn_id") == turn["turn_id"] and r.get("session_id") == sid for r in written),
               "its records name another turn or session")
    ctx.expect(ctx.walk(sid) == written, "the transcript differs from the records the one-request turn answered")
    # Finished: the session is free for the next turn; a status without records is a turn without any.
    failed = _start(ctx, sid, {"role": "assistant", "status": "failed"})
    ctx.expect_status(failed, 201)
    ctx.expect(failed.json()["status"] == "failed" and failed.json()["index"] == 1, f"second turn: {failed.json()}")
    # Without a status the turn stays running and takes the streaming path.
    streaming = _start(ctx, sid, {"role": "user", "records": _records(ctx, 1, "s")})
    ctx.expect_status(streaming, 201)
    running = streaming.json()
    ctx.expect(running["status"] == "running" and running["finished_at"] is None, f"a turn written without status: {running}")
    ctx.expect([r.get("index") for r in running.get("records") or []] == [2], "records of the running turn")
    refused = _start(ctx, sid, {"role": "assistant", "records": _records(ctx, 1, "x"), "status": "completed"})
    ctx.expect_status(refused, 409, "turn-in-progress")
    more = ctx.append(sid, running["turn_id"], 1)
    ctx.expect([r["index"] for r in more] == [3], f"an append after a one-request start got {[r['index'] for r in more]}")
    ctx.finish(sid, running["turn_id"])
    # Refused whole: too many records, or a taken turn id.
    limit = ctx.limits["max_records_per_append"]
    too_many = _start(ctx, sid, {"role": "user", "records": _records(ctx, limit + 1), "status": "completed"})
    ctx.expect_status(too_many, 413, "payload-too-large")
    taken = _start(ctx, sid, {"role": "user", "turn_id": running["turn_id"], "records": _records(ctx, 1), "status": "completed"})
    ctx.expect_status(taken, 409, "turn-exists")
    ctx.expect(len(ctx.walk(sid)) == 4, "a refused one-request turn stored records")
    ctx.expect(_next_index(ctx, sid) == 3, "a refused one-request turn started a turn")
    at_limit = _start(ctx, sid, {"role": "user", "records": _records(ctx, limit), "status": "completed"})
    ctx.expect_status(at_limit, 201)


@check("TURN-WRITE-001",
       title="Concurrent one-request turn starts through every replica: exactly one runs", needs=(WRITE,))
def concurrent_one_request_turns(ctx: CheckContext) -> None:
    def attempt(sid: str, n: int, client: ApiClient) -> Response:
        return _start(ctx, sid, {"role": "user", "records": _records(ctx, 1, f"c{n}")}, client=client)

    def judge(sid: str, answers: list[Response]) -> None:
        for answer in answers:
            if answer.status != 201:
                ctx.expect_status(answer, 409, "turn-in-progress")
        won = [a for a in answers if a.status == 201]
        # TURN-WRITE-001: a write refused with 409 turn-in-progress starts no turn, so one wins.
        ctx.expect(len(won) == 1, f"{len(won)} of {len(answers)} concurrent one-request turn starts on {sid} answered 201")
        ctx.finish(sid, won[0].json()["turn_id"])
        stored = ctx.walk(sid, "records")
        ctx.expect(len(stored) == 1, f"{len(stored)} records stored by one winning one-request start", "TURN-WRITE-001")

    rounds(ctx, lambda: ctx.create_session()["session_id"], attempt, judge)


@check("TURN-WRITE-COST-001", title="A one-request message pair costs at most 8 round trips (10 with a key), flat in records and session size",
       needs=(WRITE, QUERY_COUNT))
def one_request_turn_cost(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]

    def cost(records: int, key: bool = False) -> int:
        body = {"role": "user", "records": _records(ctx, records), "status": "completed"}
        response = _start(ctx, sid, body, ctx.new_id("key") if key else None)
        ctx.expect_status(response, 201)
        return round_trips(ctx, response, f"{records} records{' with a key' if key else ''}")

    pair = cost(2)
    pair_key = cost(2, key=True)
    ctx.expect(pair <= PAIR_BOUND, f"a one-request message pair cost {pair} round trips; at most {PAIR_BOUND}")
    ctx.expect(pair_key <= PAIR_BOUND_WITH_KEY, f"with Idempotency-Key it cost {pair_key}; at most {PAIR_BOUND_WITH_KEY}")
    limit = ctx.limits["max_records_per_append"]
    by_records = {count: cost(count) for count in sorted({1, 2, min(limit, 3), limit})}
    ctx.expect(len(set(by_records.values())) == 1, f"round trips by number of records: {by_records}")
    for _ in range(4):
        ctx.run_turn(sid, "user", 3)
    later = cost(2)
    ctx.expect(later == pair, f"a message pair cost {pair} round trips in a new session and {later} after more turns")

# ---------------------------------------------------------------- REWIND-CLEAR-001 on these writes

def _finished_by(ctx: CheckContext, way: str, finish: Any) -> None:
    """A turn finished `failed`, then `completed`, by `finish(child, status)`: only the second clears."""
    child = _rewound_child(ctx, {"mode": "rerun"})
    _action(ctx, child, stored=True)  # REWIND-CREATE-001: there is an action to keep or clear
    finish(child, "failed")
    action = _action(ctx, child)
    ctx.expect(action is not None and action.get("mode") == "rerun", f"{way} `failed` cleared or changed the pending action: {action!r}")
    finish(child, "completed")
    action = _action(ctx, child)
    ctx.expect(action is None, f"{way} `completed` did not clear the pending action: {action!r}")


@setup_step("SESS-TURN-FINISH-001", "TURN-IDEM-001")
def _keyed_finish_sent_twice(ctx: CheckContext, child: str, status: str) -> None:
    """A running turn finished with an `Idempotency-Key`, then the same finish again: the finish of a
    running turn answers 200 (SESS-TURN-FINISH-001), its repeat answers as the first one did rather
    than 409 `turn-not-running` (TURN-IDEM-001)."""
    turn = ctx.start_turn(child)
    key = ctx.new_id("k")
    ctx.expect_status(_finish(ctx, child, turn["turn_id"], status, key), 200, None, "SESS-TURN-FINISH-001")
    ctx.expect_status(_finish(ctx, child, turn["turn_id"], status, key), 200, None, "TURN-IDEM-001")


@setup_step("TURN-WRITE-001")
def _written_in_one_request(ctx: CheckContext, child: str, status: str) -> None:
    """A turn written, records and final `status`, in one request: 201 (TURN-WRITE-001)."""
    body = {"role": "user", "records": [{"type": "message", "content": {"text": status}}], "status": status}
    ctx.expect_status(_start(ctx, child, body), 201, None, "TURN-WRITE-001")


@check("REWIND-CLEAR-001", title="A keyed finish as completed clears the pending action; as failed it keeps it",
       needs=("rewind", "fork", "idempotent-turns"))
def rewind_cleared_by_a_keyed_finish(ctx: CheckContext) -> None:
    _finished_by(ctx, "a finish with an Idempotency-Key (sent twice)", lambda child, status: _keyed_finish_sent_twice(ctx, child, status))


@check("REWIND-CLEAR-001", title="A turn written completed in one request clears the pending action; failed, it keeps it",
       needs=("rewind", "fork", "turn-write"))
def rewind_cleared_by_a_one_request_write(ctx: CheckContext) -> None:
    _finished_by(ctx, "a turn written in one request", lambda child, status: _written_in_one_request(ctx, child, status))
