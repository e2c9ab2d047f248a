"""Chapter: suspend and recover (capability `suspend`)."""

from __future__ import annotations

import json
from typing import Any

from conformance.checks.contention import rounds
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.registry import check, setup_step

CAPABILITY = "suspend"
NEEDS = (CAPABILITY,)


# ---------------------------------------------------------------- helpers
def turn_path(sid: str, tid: str, action: str = "") -> str:
    return f"/sessions/{sid}/turns/{tid}" + (f"/{action}" if action else "")


def post(ctx: CheckContext, sid: str, tid: str, action: str, client: ApiClient | None = None, **kwargs: Any) -> Response:
    return (client or ctx.alice).post(turn_path(sid, tid, action), **kwargs)


@setup_step("SUSPEND-TURN-001")
def read_turn(ctx: CheckContext, sid: str, tid: str, client: ApiClient | None = None) -> dict[str, Any]:
    return ctx.ok((client or ctx.alice).get(turn_path(sid, tid)), 200, "SUSPEND-TURN-001")


@setup_step("SUSPEND-001")
def suspend_ok(ctx: CheckContext, sid: str, tid: str) -> dict[str, Any]:
    return ctx.ok(post(ctx, sid, tid, "suspend"), 200, "SUSPEND-001")


@setup_step("SUSPEND-RECOVER-001")
def recover_ok(ctx: CheckContext, sid: str, tid: str) -> dict[str, Any]:
    return ctx.ok(post(ctx, sid, tid, "recover"), 200, "SUSPEND-RECOVER-001")


@setup_step("SUSPEND-INPUT-001")
def queue(ctx: CheckContext, sid: str, tid: str, n: int) -> dict[str, Any]:
    response = post(ctx, sid, tid, "inputs", json={"content": {"input": n, "nonce": ctx.rng.randrange(10**9)}})
    return ctx.ok(response, 201, "SUSPEND-INPUT-001")


@setup_step("SUSPEND-DROP-001")
def inputs_of(ctx: CheckContext, sid: str, tid: str) -> list[dict[str, Any]]:
    return ctx.ok(ctx.alice.get(turn_path(sid, tid, "inputs")), 200, "SUSPEND-DROP-001")["inputs"]  # type: ignore[no-any-return]


@setup_step("SUSPEND-DELIVER-001")
def deliver_ok(ctx: CheckContext, sid: str, tid: str) -> list[dict[str, Any]]:
    return ctx.ok(post(ctx, sid, tid, "inputs/deliver"), 200, "SUSPEND-DELIVER-001")["records"]  # type: ignore[no-any-return]


def running_turn(ctx: CheckContext, records: int = 2) -> tuple[str, str, list[dict[str, Any]]]:
    sid = ctx.create_session()["session_id"]
    tid = ctx.start_turn(sid)["turn_id"]
    written = ctx.append(sid, tid, records) if records else []
    return sid, tid, written


def suspended_turn(ctx: CheckContext, records: int = 2) -> tuple[str, str, list[dict[str, Any]]]:
    sid, tid, written = running_turn(ctx, records)
    suspend_ok(ctx, sid, tid)
    return sid, tid, written


def statuses(items: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return [(item.get("index"), item.get("status")) for item in items]


# ---------------------------------------------------------------- checks
@check("SUSPEND-TURN-001", title="A turn is read with its current status; a turn of another session is not found", needs=NEEDS)
def turn_read(ctx: CheckContext) -> None:
    sid, tid, _ = running_turn(ctx, 1)
    ctx.expect(read_turn(ctx, sid, tid).get("status") == "running", "a running turn is not read as running")
    suspend_ok(ctx, sid, tid)
    ctx.expect(read_turn(ctx, sid, tid).get("status") == "suspended", "a suspended turn is not read as suspended")
    recover_ok(ctx, sid, tid)
    ctx.finish(sid, tid, "failed")
    got = read_turn(ctx, sid, tid)
    ctx.expect(
        (got.get("status"), got.get("turn_id"), got.get("index")) == ("failed", tid, 0) and got.get("finished_at"),
        f"a failed turn is read as {got}",
    )
    other = ctx.create_session()["session_id"]
    for where, which in ((other, tid), (sid, ctx.new_id("missing"))):
        ctx.expect_status(ctx.alice.get(turn_path(where, which)), 404, "not-found")


@check("SUSPEND-001", title="Suspend a running turn: stored before the answer, seen by every replica; only a running turn", needs=NEEDS)
def suspend_running_turn(ctx: CheckContext) -> None:
    sid, tid, _ = running_turn(ctx)
    body = suspend_ok(ctx, sid, tid)
    turn = body.get("turn", {})
    ctx.expect(
        (turn.get("turn_id"), turn.get("status"), turn.get("finished_at")) == (tid, "suspended", None),
        f"the suspension answered the turn as {turn}",
    )
    for client in ctx.spread():  # stored before the answer: every process sees it at once
        seen = read_turn(ctx, sid, tid, client)
        ctx.expect(seen.get("status") == "suspended", f"after the answer, {client.base_url} reads the turn as {seen.get('status')}")
    again = post(ctx, sid, tid, "suspend")
    ctx.expect_status(again, 409, "turn-not-running")
    recover_ok(ctx, sid, tid)
    ctx.finish(sid, tid)
    ctx.expect_status(post(ctx, sid, tid, "suspend"), 409, "turn-not-running")
    ctx.expect(read_turn(ctx, sid, tid).get("status") == "completed", "a refused suspension changed a completed turn")


@check("SUSPEND-NO-TERMINAL-001", title="Suspending writes no record and does not finish the turn", needs=NEEDS)
def suspend_writes_no_record(ctx: CheckContext) -> None:
    sid, tid, written = running_turn(ctx, 3)
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    before = {"records": ctx.walk(sid, "records"), "transcript": ctx.walk(sid), "child": ctx.walk(child)}
    suspend_ok(ctx, sid, tid)
    after = {"records": ctx.walk(sid, "records"), "transcript": ctx.walk(sid), "child": ctx.walk(child)}
    for kind in before:
        ctx.expect(
            ctx.keys(after[kind]) == ctx.keys(before[kind]) and after[kind] == before[kind],
            f"suspending changed the {kind}: {ctx.keys(before[kind])} became {ctx.keys(after[kind])} "
            f"({[r.get('type') for r in after[kind][len(before[kind]):]]} added)",
        )
    turn = read_turn(ctx, sid, tid)
    ctx.expect(
        turn.get("status") == "suspended" and turn.get("finished_at") is None,
        f"after suspending, the turn is {turn.get('status')} with finished_at {turn.get('finished_at')!r}",
    )
    recover_ok(ctx, sid, tid)
    more = ctx.append(sid, tid, 1)
    ctx.finish(sid, tid)
    ctx.expect(
        ctx.keys(ctx.walk(sid, "records")) == ctx.keys(written + more),
        "the turn holds records nobody appended after a suspension",
    )


@check("SUSPEND-INPUT-001", title="Inputs queue on a running turn only, within max_record_bytes", needs=NEEDS)
def input_queue(ctx: CheckContext) -> None:
    sid, tid, _ = running_turn(ctx, 1)
    queued = [queue(ctx, sid, tid, n) for n in range(3)]
    ctx.expect(
        [(q.get("index"), q.get("status"), q.get("record_id")) for q in queued]
        == [(n, "pending", None) for n in range(3)],
        f"queued inputs answered {statuses(queued)}; expected indexes 0..2, pending, no record",
    )
    overhead = len(json.dumps({"text": ""}, separators=(",", ":")))
    limit = ctx.limits["max_record_bytes"]
    exact = post(ctx, sid, tid, "inputs", json={"content": {"text": "x" * (limit - overhead)}})
    ctx.expect_status(exact, 201)
    over = post(ctx, sid, tid, "inputs", json={"content": {"text": "x" * (limit - overhead + 1)}})
    ctx.expect_status(over, 413, "payload-too-large")
    listed = inputs_of(ctx, sid, tid)
    ctx.expect(len(listed) == 4, f"the turn lists {len(listed)} inputs after 4 accepted and 1 refused")
    ctx.finish(sid, tid)
    ctx.expect_status(post(ctx, sid, tid, "inputs", json={"content": {"late": True}}), 409, "turn-not-running")
    ctx.expect(len(inputs_of(ctx, sid, tid)) == 4, "an input was queued on a finished turn")


@check("SUSPEND-DELIVER-001", title="Delivered inputs become records of type input, oldest first, at most one batch", needs=NEEDS)
def deliver_inputs(ctx: CheckContext) -> None:
    sid, tid, written = running_turn(ctx, 2)
    batch = ctx.limits["max_records_per_append"]
    count = min(batch + 1, 12)
    queued = [queue(ctx, sid, tid, n) for n in range(count)]
    first = ctx.ok(post(ctx, sid, tid, "inputs/deliver"), 200, "SUSPEND-DELIVER-001")["records"]
    expected = queued[: min(batch, count)]
    ctx.expect(
        [(r.get("type"), r.get("content"), r.get("turn_id")) for r in first]
        == [("input", q["content"], tid) for q in expected],
        f"delivery answered {[(r.get('type'), r.get('content')) for r in first]}; expected the {len(expected)} oldest "
        "inputs as records of type input",
    )
    ctx.expect(
        [r.get("index") for r in first] == list(range(len(written), len(written) + len(first))),
        f"delivered records have indexes {[r.get('index') for r in first]} after {len(written)} records",
    )
    rest = ctx.ok(post(ctx, sid, tid, "inputs/deliver"), 200, "SUSPEND-DELIVER-001")["records"]
    ctx.expect(
        [r.get("content") for r in rest] == [q["content"] for q in queued[len(first):]],
        f"the second delivery answered {len(rest)} records; {count - len(first)} inputs were left",
    )
    nothing = ctx.ok(post(ctx, sid, tid, "inputs/deliver"), 200, "SUSPEND-DELIVER-001")["records"]
    ctx.expect(nothing == [], f"a delivery with nothing pending answered {len(nothing)} records")
    listed = inputs_of(ctx, sid, tid)
    by_record = {r["record_id"] for r in first + rest}
    ctx.expect(
        all(item.get("status") == "delivered" and item.get("record_id") in by_record for item in listed),
        f"after delivery the inputs read {statuses(listed)}",
    )
    ctx.expect(ctx.keys(ctx.walk(sid, "records")) == ctx.keys(written + first + rest), "the delivered records are not the turn's records")
    ctx.finish(sid, tid)
    queue_after = post(ctx, sid, tid, "inputs/deliver")
    ctx.expect_status(queue_after, 409, "turn-not-running")


@check("SUSPEND-DROP-001", title="Suspending drops the pending inputs, reports them in order, and never delivers them", needs=NEEDS)
def suspend_drops_pending_inputs(ctx: CheckContext) -> None:
    sid, tid, written = running_turn(ctx, 1)
    early = [queue(ctx, sid, tid, n) for n in range(2)]
    delivered = deliver_ok(ctx, sid, tid)
    late = [queue(ctx, sid, tid, n) for n in range(2, 5)]
    body = suspend_ok(ctx, sid, tid)
    dropped = body.get("dropped_inputs", [])
    ctx.expect(
        [(d.get("input_id"), d.get("status"), d.get("content")) for d in dropped]
        == [(q["input_id"], "dropped", q["content"]) for q in late],
        f"the suspension reported dropped {[(d.get('index'), d.get('status')) for d in dropped]}; expected the 3 pending "
        "inputs (indexes 2..4), in queue order, dropped",
    )
    listed = inputs_of(ctx, sid, tid)
    ctx.expect(
        statuses(listed) == [(0, "delivered"), (1, "delivered"), (2, "dropped"), (3, "dropped"), (4, "dropped")],
        f"after the suspension the inputs read {statuses(listed)}",
    )
    recover_ok(ctx, sid, tid)
    again = deliver_ok(ctx, sid, tid)
    ctx.expect(again == [], f"after recovering, {len(again)} dropped inputs were delivered")
    ctx.expect(
        ctx.keys(ctx.walk(sid, "records")) == ctx.keys(written + delivered),
        "the records of delivered inputs did not survive the suspension, or dropped inputs became records",
    )
    ctx.expect(statuses(inputs_of(ctx, sid, tid))[2:] == [(2, "dropped"), (3, "dropped"), (4, "dropped")], "recovering revived dropped inputs")
    ctx.expect(len(early) == 2, "setup")


@check("SUSPEND-UNFINISHED-001", title="While a turn is suspended no turn starts and nothing is written to it", needs=NEEDS)
def suspended_turn_is_unfinished(ctx: CheckContext) -> None:
    sid, tid, written = suspended_turn(ctx, 2)
    refusals = [
        (ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}), "turn-in-progress", "starting a turn"),
        (post(ctx, sid, tid, "records", json={"records": [{"type": "message", "content": {"x": 1}}]}), "turn-not-running", "appending"),
        (post(ctx, sid, tid, "finish", json={"status": "completed"}), "turn-not-running", "finishing"),
        (post(ctx, sid, tid, "inputs", json={"content": {"x": 1}}), "turn-not-running", "queueing an input"),
        (post(ctx, sid, tid, "inputs/deliver"), "turn-not-running", "delivering inputs"),
    ]
    for response, kind, what in refusals:
        ctx.expect(response.status == 409, f"{what} while the turn is suspended answered {response.status}, expected 409 {kind}")
        ctx.expect_status(response, 409, kind)
    ctx.expect(ctx.keys(ctx.walk(sid, "records")) == ctx.keys(written), "a refused write changed the suspended turn's records")
    turn = read_turn(ctx, sid, tid)
    ctx.expect(turn.get("status") == "suspended", f"after refused writes the turn is {turn.get('status')}")
    session = ctx.ok(ctx.alice.get(f"/sessions/{sid}"), 200)
    ctx.expect(session is not None, "setup")
    recover_ok(ctx, sid, tid)
    ctx.expect_status(ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}), 409, "turn-in-progress")
    ctx.finish(sid, tid)
    nxt = ctx.start_turn(sid)
    ctx.expect(nxt.get("index") == 1, f"the turn started after recovery and finish has index {nxt.get('index')}")


@check("SUSPEND-RECOVER-001", title="Recovering resumes the same turn; records append to it", needs=NEEDS)
def recover_same_turn(ctx: CheckContext) -> None:
    sid, tid, written = running_turn(ctx, 2)
    ctx.expect_status(post(ctx, sid, tid, "recover"), 409, "turn-not-suspended")
    suspend_ok(ctx, sid, tid)
    turn = recover_ok(ctx, sid, tid)
    ctx.expect(
        (turn.get("turn_id"), turn.get("index"), turn.get("status"), turn.get("finished_at")) == (tid, 0, "running", None),
        f"recovering answered {turn}; expected turn {tid}, index 0, running",
    )
    ctx.expect(read_turn(ctx, sid, tid).get("status") == "running", "the recovered turn is not read as running")
    more = ctx.append(sid, tid, 2)
    ctx.expect(
        [(r.get("turn_id"), r.get("index")) for r in more] == [(tid, 2), (tid, 3)],
        f"records appended after recovery: {[(r.get('turn_id'), r.get('index')) for r in more]}; expected turn {tid}, indexes 2 and 3",
    )
    ctx.expect_status(post(ctx, sid, tid, "recover"), 409, "turn-not-suspended")
    done = ctx.finish(sid, tid)
    ctx.expect(done.get("status") == "completed", f"the recovered turn finished as {done.get('status')}")
    ctx.expect_status(post(ctx, sid, tid, "recover"), 409, "turn-not-suspended")
    ctx.expect(ctx.keys(ctx.walk(sid)) == ctx.keys(written + more), "the transcript is not the turn's records before and after recovery")


@check("SUSPEND-RECOVER-CONCURRENT-001", title="Concurrent recovers of one suspended turn: one 200, the rest 409 turn-not-suspended", needs=NEEDS)
def concurrent_recovers(ctx: CheckContext) -> None:
    def prepare() -> tuple[str, str]:
        sid, tid, _ = suspended_turn(ctx, 1)
        return sid, tid

    def attempt(state: tuple[str, str], n: int, client: ApiClient) -> Response:
        return client.post(turn_path(state[0], state[1], "recover"))

    def judge(state: tuple[str, str], answers: list[Response]) -> None:
        for answer in answers:
            if answer.status != 200:
                ctx.expect_status(answer, 409, "turn-not-suspended")
        won = [a for a in answers if a.status == 200]
        ctx.expect(len(won) == 1, f"{len(won)} of {len(answers)} concurrent recovers of turn {state[1]} answered 200")

    rounds(ctx, prepare, attempt, judge)


@check("SUSPEND-ABANDON-001", title="Abandoning a suspended turn finishes it, keeps its records and frees the session", needs=NEEDS)
def abandon_suspended_turn(ctx: CheckContext) -> None:
    sid, tid, written = running_turn(ctx, 2)
    ctx.expect_status(post(ctx, sid, tid, "abandon"), 409, "turn-not-suspended")
    suspend_ok(ctx, sid, tid)
    turn = ctx.ok(post(ctx, sid, tid, "abandon"), 200)
    ctx.expect(
        turn.get("status") == "abandoned" and turn.get("finished_at") and turn.get("turn_id") == tid,
        f"abandoning answered {turn}",
    )
    ctx.expect(read_turn(ctx, sid, tid).get("status") == "abandoned", "the abandoned turn is not read as abandoned")
    ctx.expect_status(post(ctx, sid, tid, "abandon"), 409, "turn-not-suspended")
    ctx.expect_status(post(ctx, sid, tid, "recover"), 409, "turn-not-suspended")
    ctx.expect(ctx.keys(ctx.walk(sid)) == ctx.keys(written), "abandoning changed the records")
    child = ctx.fork_ok(sid, {"mode": "latest"})
    ctx.expect(
        child["lineage"]["inherited_turn_count"] == 1 and ctx.keys(ctx.walk(child["session"]["session_id"])) == ctx.keys(written),
        f"a fork at the latest turn after abandoning inherits {child['lineage']['inherited_turn_count']} turns",
    )
    nxt = ctx.start_turn(sid)
    ctx.expect(nxt.get("index") == 1, f"the turn started after abandoning has index {nxt.get('index')}")


@check("SUSPEND-FORK-001", title="Forks treat a suspended turn as incomplete", needs=NEEDS)
def fork_of_suspended_turn(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    _, finished = ctx.run_turn(sid, "user", 2)
    sid_turn = ctx.start_turn(sid, "assistant")["turn_id"]
    ctx.append(sid, sid_turn, 2)
    suspend_ok(ctx, sid, sid_turn)
    through = ctx.fork(sid, {"mode": "through", "turn_id": sid_turn})
    ctx.expect_status(through, 409, "turn-incomplete")
    for cut in ({"mode": "latest"}, {"mode": "before", "turn_id": sid_turn}):
        child = ctx.fork_ok(sid, cut)
        got = ctx.walk(child["session"]["session_id"])
        ctx.expect(
            child["lineage"]["inherited_turn_count"] == 1 and ctx.keys(got) == ctx.keys(finished),
            f"a fork {cut} of a session whose last turn is suspended inherits {child['lineage']['inherited_turn_count']} turns "
            f"and records {ctx.keys(got)}; expected 1 turn and {ctx.keys(finished)}",
        )


@check(
    "SUSPEND-WRITE-001",
    title="Suspend, recover, abandon and inputs need a writer role and the held writer lease",
    needs=(CAPABILITY, "sharing", "writer-lease"),
)
def writes_need_writer_role_and_lease(ctx: CheckContext) -> None:
    from conformance.checks.authorization.common import grant
    from conformance.checks.leases import held_lease

    owner, reader, writer = ctx.principals("owner", "reader", "writer")
    sid, tid, _ = running_turn(ctx, 1)
    grant(ctx, owner, sid, reader, "reader")
    grant(ctx, owner, sid, writer, "writer")
    # each refused where the turn's state would let the write through
    on_running = [("inputs", {"json": {"content": {"x": 1}}}), ("inputs/deliver", {}), ("suspend", {})]
    on_suspended = [("recover", {}), ("abandon", {})]

    def refused(actions: list[tuple[str, dict[str, Any]]], state: str, **extra: Any) -> None:
        for action, options in actions:
            if extra:
                ctx.expect_status(post(ctx, sid, tid, action, **options), 409, "writer-conflict")
                continue
            ctx.expect_status(post(ctx, sid, tid, action, client=reader, **options), 403, "forbidden")
            ctx.expect_status(post(ctx, sid, tid, action, client=ctx.bob, **options), 404, "not-found")
        turn = read_turn(ctx, sid, tid)
        ctx.expect(
            turn.get("status") == state and inputs_of(ctx, sid, tid) == [],
            f"a refused write changed the turn: it is {turn.get('status')} with {len(inputs_of(ctx, sid, tid))} inputs",
        )

    refused(on_running, "running")
    suspend_ok(ctx, sid, tid)
    refused(on_suspended, "suspended")
    ctx.ok(post(ctx, sid, tid, "recover", client=writer), 200)  # a writer may
    ctx.ok(post(ctx, sid, tid, "suspend", client=writer), 200)
    ctx.ok(post(ctx, sid, tid, "recover", client=writer), 200)
    lease = held_lease(ctx, sid)
    refused(on_running, "running", lease=True)
    headers = {"Writer-Lease": lease["lease_id"]}
    ctx.ok(post(ctx, sid, tid, "suspend", headers=headers), 200)
    refused(on_suspended, "suspended", lease=True)
    ctx.ok(post(ctx, sid, tid, "recover", headers=headers), 200)
    ctx.ok(post(ctx, sid, tid, "inputs", headers=headers, json={"content": {"x": 1}}), 201)
